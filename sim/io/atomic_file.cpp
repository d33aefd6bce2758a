#include "sim/io/atomic_file.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <system_error>

namespace arachne {

std::string temporary_path_for(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string name = "." + p.filename().string() + ".tmp-" + std::to_string(::getpid());
  return (p.parent_path() / name).string();
}

void remove_stale_temporaries(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string prefix = "." + p.filename().string() + ".tmp-";
  const std::filesystem::path dir = p.parent_path().empty() ? std::filesystem::path(".") : p.parent_path();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const std::size_t digits = std::min(rest.find_first_not_of("0123456789"), rest.size());
    if (digits == 0 || digits > 9 || (digits < rest.size() && rest[digits] != '.')) continue;  // pids have <= 7 digits
    const long pid = std::stol(rest.substr(0, digits));
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    std::error_code remove_ec;
    std::filesystem::remove(entry.path(), remove_ec);
  }
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(temporary_path_for(path_)) {
  remove_stale_temporaries(path_);
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);  // best effort: nothing to report from a destructor
  }
}

void AtomicFile::commit() {
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) {
    std::filesystem::remove(tmp_, ec);
    throw std::runtime_error("cannot rename '" + tmp_ + "' to '" + path_ + "': " + ec.message());
  }
  committed_ = true;
}

void write_file_atomically(const std::string& path, const std::function<void(const std::string&)>& write) {
  AtomicFile file(path);
  write(file.tmp_path());
  file.commit();
}

void write_text_atomically(const std::string& path, const std::string& text) {
  write_file_atomically(path, [&text](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot create '" + tmp + "': " + std::strerror(errno));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) throw std::runtime_error("cannot write '" + tmp + "'");
  });
}

}  // namespace arachne
