// The two failures of a batch workflow that a caller tells apart from any
// other (a std::runtime_error: the catalog, a write, a worker that stopped):
//   InputError            the user's input is wrong (a bad measurements file,
//                         an unknown target): the caller shows the message and
//                         exits 2. A manifest's own errors stay ManifestError
//                         (manifest/manifest.h), with their file and line.
//   EvaluatorUnavailable  the Python evaluator could not start or answer its
//                         hello (a missing package, a broken venv): exit 3.
// Both messages are complete sentences for a person; nothing was written when
// either is thrown.
#pragma once
#include <stdexcept>

namespace kiln::batch {

struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct EvaluatorUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace kiln::batch
