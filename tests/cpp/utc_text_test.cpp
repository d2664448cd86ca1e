// common/utc_text.h: unix times as UTC text (kiln retry's job message, the dashboard).
#include "common/utc_text.h"

#include <gtest/gtest.h>

#include <string>

using kiln::utc_text;

TEST(UtcText, FormatsInUtcAndDropsFractions) {
  EXPECT_EQ(utc_text(0, "%Y-%m-%dT%H:%M:%SZ"), "1970-01-01T00:00:00Z");
  EXPECT_EQ(utc_text(1700000000.9, "%Y-%m-%dT%H:%M:%SZ"), "2023-11-14T22:13:20Z");
  EXPECT_EQ(utc_text(1700000000, "%Y-%m-%d %H:%M"), "2023-11-14 22:13");
}

TEST(UtcText, TextTooLongIsEmpty) {
  EXPECT_EQ(utc_text(0, std::string(70, 'x').c_str()), "");
  EXPECT_EQ(utc_text(0, std::string(63, 'x').c_str()), std::string(63, 'x'));
}
