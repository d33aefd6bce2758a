#include "sim/io/atomic_file.h"

#include <unistd.h>

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

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(temporary_path_for(path_)) {}

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
