#include "fuzz/fuzz_input.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>

#include "sim/io/input_error.h"

namespace arachne::fuzz {
namespace fs = std::filesystem;

namespace {

struct Scratch {
  std::string dir;
  Scratch() {
    dir = (fs::temp_directory_path() / ("arachne_fuzz." + std::to_string(::getpid()))).string();
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "FINDING: %s\n", what.c_str());
  std::abort();
}

}  // namespace

const std::string& scratch_dir() {
  static const Scratch s;
  return s.dir;
}

void copy_fixture(const std::string& repo_path, const std::string& name) {
  fs::copy_file(fs::path(ARACHNE_SOURCE_DIR) / repo_path, fs::path(scratch_dir()) / name,
                fs::copy_options::overwrite_existing);
}

std::string write_input(const std::string& name, const std::uint8_t* data, std::size_t size) {
  const std::string path = (fs::path(scratch_dir()) / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) finding("cannot write the input file " + path);  // the harness's own failure, not the input's
  return path;
}

const GpuCatalog& catalog() {
  static const GpuCatalog c = GpuCatalog::load_default();
  return c;
}

void as_cli(void (*load)(const std::string& path, void* context), const std::string& path, void* context) {
  try {
    load(path, context);
  } catch (const InputError& e) {
    if (e.where().empty()) finding("bad input reported with an empty where: '" + e.reason() + "'");
  } catch (const std::exception& e) {
    finding(std::string("internal error (exit 1) from input: ") + e.what());
  } catch (...) {
    finding("internal error (exit 1) from input: an exception of unknown type");
  }
}

}  // namespace arachne::fuzz
