// The runtime's internal failure type: a status for the C API and a message
// that names the file or both sides of a mismatch.
#pragma once
#include <stdexcept>
#include <string>

#include "kiln/runtime.h"

namespace kiln::rt {

struct Error : std::runtime_error {
  Error(kiln_status s, const std::string& msg) : std::runtime_error(msg), status(s) {}
  kiln_status status;
};

}  // namespace kiln::rt
