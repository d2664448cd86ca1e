// Content hashing (SHA-256 through OpenSSL).
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace kiln {

// Lower-case hex of a byte string (two digits a byte).
std::string hex_text(std::string_view bytes);

// Lower-case hex SHA-256 of a byte string.
std::string sha256_hex(std::string_view bytes);

// Lower-case hex SHA-256 of a file's contents; throws std::runtime_error if unreadable.
std::string sha256_file(const std::filesystem::path& path);

// Reads a whole file; throws std::runtime_error naming the path if unreadable.
std::string read_file(const std::filesystem::path& path);

}  // namespace kiln
