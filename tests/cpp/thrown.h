// Tests of failures: what an expected exception says.
#pragma once
#include <string>

#include <gtest/gtest.h>

namespace kiln_test {

// Runs f, which must throw E, and returns the exception's what() for the caller's
// checks of the message. When f returns, the test fails and the result is "".
// Anything else f throws propagates (and fails the test).
template <class E, class F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception, none was thrown";
  return "";
}

}  // namespace kiln_test
