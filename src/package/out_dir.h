// Where `kiln package` may write and what it may delete (issue 22: file
// safety). A package is built in a fresh temporary sibling of --out and
// renamed into place; an existing --out is replaced only when it is a Kiln
// package by its content (why_not_kiln_package), and never when it
// is /, the home directory, the working directory, the catalog's directory or
// an ancestor of one of them. File names built from catalog data go through
// safe_component(), so an operator named "../../x" cannot leave the package.
//
// Pure filesystem code; no global state; thread-compatible.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// --out as given, made absolute and lexically normal, without a trailing
// separator ("dir/" and "dir" are the same). Throws std::invalid_argument for
// an empty path.
std::filesystem::path normalise_out(const std::filesystem::path& out);

// Throws std::invalid_argument (a message naming the path and why) when `out`
// may not be a package directory: it is "/", the home directory, the working
// directory, or a directory in `protected_dirs` (the catalog's directory), or
// an ancestor of any of them; or it exists and is not a directory. Symlinks
// are resolved before comparing.
void check_out_allowed(const std::filesystem::path& out, const std::vector<std::filesystem::path>& protected_dirs);

// "" when `dir` is a Kiln package by its content, which --force may replace:
// manifest.json is a JSON object with a "format" starting "kiln-package/", a
// SHA256SUMS ("<sha256>  <relative path>" lines) lists every regular file in
// the directory besides SHA256SUMS and SHA256SUMS.sig, the only
// subdirectories are objects/ and verify/, and there is nothing else (no
// symbolic link, no other file type). Otherwise the reason, naming the first
// foreign file (sorted by path). Hashes are not checked.
std::string why_not_kiln_package(const std::filesystem::path& dir);
bool is_kiln_package(const std::filesystem::path& dir);  // why_not_kiln_package(dir).empty()

// A fresh directory beside `out` (".<name>.kiln-XXXXXX", mkdtemp(3)): never an
// existing path. Throws std::runtime_error when it cannot be created.
std::filesystem::path make_temp_sibling(const std::filesystem::path& out);

// Moves the finished `tmp` to `out`. When `out` exists: an empty directory is
// replaced; a Kiln package is replaced only with `force` (it is first renamed
// to another fresh sibling, then deleted); anything else is refused. Throws
// std::invalid_argument for a refusal (tmp is left for the caller to remove).
void install_dir(const std::filesystem::path& tmp, const std::filesystem::path& out, bool force);

// A file-name component from untrusted text: [A-Za-z0-9._+-] kept, anything
// else becomes '_', no leading '.' and no "..", at most 80 characters, never empty.
std::string safe_component(std::string_view text);

// root / rel, after checking that rel is relative, has no "..", "." or empty
// component and stays inside root; throws std::invalid_argument otherwise.
std::filesystem::path path_inside(const std::filesystem::path& root, const std::string& rel);

}  // namespace kiln
