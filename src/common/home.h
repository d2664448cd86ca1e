// Where Kiln's data files live: worker/, kernels/, configs/, db/.
#pragma once
#include <filesystem>

namespace kiln {

// $KILN_HOME if set, else the source tree the binary was built from.
std::filesystem::path kiln_home();

// The Python interpreter for workers: $KILN_PYTHON, else "python3".
std::string python_executable();

}  // namespace kiln
