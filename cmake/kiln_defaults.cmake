# Kiln's C++ defaults, included by the top-level CMakeLists.txt and by
# src/runtime/CMakeLists.txt when libkilnrt is built alone: C++20 without
# compiler extensions, RelWithDebInfo unless a build type is given, and the
# warnings every target compiles with.
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE RelWithDebInfo)
endif()
add_compile_options(-Wall -Wextra -Wno-unused-parameter)
