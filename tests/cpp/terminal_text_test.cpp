// common/terminal_text.h: text from files, catalogs and workers made safe to print.
#include "common/terminal_text.h"

#include <gtest/gtest.h>

#include <string>

using kiln::terminal_safe;

TEST(TerminalSafe, EscapesC0ControlsAndDel) {
  EXPECT_EQ(terminal_safe("a\x1b[2Jb"), "a\\x1b[2Jb");
  EXPECT_EQ(terminal_safe(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(terminal_safe("\x07\x7f\r"), "\\x07\\x7f\\x0d");
  EXPECT_EQ(terminal_safe("a\nb\tc"), "a\\x0ab\\x09c");
}

TEST(TerminalSafe, KeepsNewlinesAndTabsWhenAsked) {
  EXPECT_EQ(terminal_safe("a\nb\tc\x1b", true), "a\nb\tc\\x1b");
  EXPECT_EQ(terminal_safe("a\rb", true), "a\\x0db");
}

TEST(TerminalSafe, EscapesC1ControlsButKeepsOtherUtf8) {
  EXPECT_EQ(terminal_safe("\xc2\x9b" "2J"), "\\u009b2J");      // CSI as U+009B
  EXPECT_EQ(terminal_safe("caf\xc3\xa9 \xe2\x80\xae"), "caf\xc3\xa9 \xe2\x80\xae");  // é, U+202E kept
  EXPECT_EQ(terminal_safe("\xf0\x9f\x94\xa5"), "\xf0\x9f\x94\xa5");  // 4-byte sequence
}

TEST(TerminalSafe, EscapesBytesThatAreNotUtf8) {
  EXPECT_EQ(terminal_safe("\x9b" "2J"), "\\x9b2J");             // a lone 8-bit CSI
  EXPECT_EQ(terminal_safe("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(terminal_safe("\xc3"), "\\xc3");                    // truncated sequence
  EXPECT_EQ(terminal_safe("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(terminal_safe("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a UTF-16 surrogate
}
