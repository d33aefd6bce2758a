// Atomic output files (DESIGN.md "Results"): a file is written under a temporary name in the same
// directory and renamed onto its final name only when complete, so readers never see a partial file and a
// failed or interrupted write leaves nothing behind under the final name.
#pragma once
#include <functional>
#include <string>

namespace arachne {

// The temporary name used for `path`: ".<file name>.tmp-<pid>" in the same directory (same file system, so
// the final rename is atomic).
std::string temporary_path_for(const std::string& path);

// Removes the temporary files of `path` left by writers that died before they could (kill -9, power
// loss): ".<file name>.tmp-<pid>" and ".<file name>.tmp-<pid>.<suffix>" whose <pid> is no live process.
// Files of live processes (another run writing the same target) are left alone. Best effort, silent.
// Every AtomicFile does this when it starts, so leftovers last only until the next write of the target.
void remove_stale_temporaries(const std::string& path);

// A file being written. The writer writes to tmp_path(); commit() renames it onto path(). Destroying an
// uncommitted AtomicFile removes the temporary file (also during stack unwinding).
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& path() const { return path_; }
  const std::string& tmp_path() const { return tmp_; }
  // Renames the temporary file onto path(). Throws std::runtime_error when that fails (temp file removed).
  void commit();

 private:
  std::string path_;
  std::string tmp_;
  bool committed_ = false;
};

// Calls write(tmp_path) and commits. If write throws, the temporary file is removed and the exception
// propagates; no file appears under `path`.
void write_file_atomically(const std::string& path, const std::function<void(const std::string&)>& write);
// Text content (JSON, YAML, CSV). Throws std::runtime_error when the file cannot be written.
void write_text_atomically(const std::string& path, const std::string& text);

}  // namespace arachne
