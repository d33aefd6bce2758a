// HDF5 results (DESIGN.md "Results (HDF5)"), HDF5 1.10 C API. Files are self-describing and reproducible:
// - root attributes program_version, command_line, seed, config_yaml (the full input configuration);
// - every dataset has a `units` attribute: one string per column for tables (in column order), one string
//   for plain datasets; "1" marks a dimensionless number, "-" text;
// - tables are chunked, appendable (H5S_UNLIMITED) compound datasets, written in batches;
// - object time stamps are off (H5Pset_obj_track_times) and the format is pinned (libver v18), so two runs
//   with the same content give byte-identical files;
// - files are written under a temporary name and renamed when complete (sim/io/atomic_file.h).
// h5py reads everything without project code: tables as structured arrays, strings as str.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "sim/exec/sim_result.h"

namespace arachne::h5 {

using Handle = std::int64_t;  // hid_t, kept out of this header so includers need not see hdf5.h

enum class ColumnType { Float64, Int64, Bool, String };

struct Column {
  std::string name;
  ColumnType type = ColumnType::Float64;
  std::string unit;       // "s", "1/s", "GiB", "B", "1" (dimensionless), "-" (text/flag)
  int string_width = 0;   // String only: 0 = variable length, else fixed width in bytes (NUL-padded)
};

using Cell = std::variant<double, std::int64_t, bool, std::string>;
using Row = std::vector<Cell>;

class File;

// A chunked compound dataset that grows by appended batches of rows.
class Table {
 public:
  Table(File& file, const std::string& path, std::vector<Column> columns, std::uint64_t chunk_rows = 256);
  ~Table();
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;
  Table(Table&&) noexcept;
  Table& operator=(Table&&) = delete;

  // Each row must have one cell per column, of the column's type (an int64 cell is accepted for Float64).
  // Throws std::invalid_argument on a mismatch, std::runtime_error on an HDF5 failure.
  void append(const std::vector<Row>& rows);
  std::uint64_t rows() const { return rows_; }
  const std::vector<Column>& columns() const { return columns_; }

 private:
  std::vector<Column> columns_;
  std::vector<std::size_t> offsets_;  // in the in-memory row layout
  std::size_t row_size_ = 0;
  Handle dset_ = -1, mem_type_ = -1;
  std::uint64_t rows_ = 0;
};

// An HDF5 file created (truncated) at a path. Use write_h5_atomically to get the temp-name + rename.
class File {
 public:
  explicit File(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  Handle id() const { return file_; }
  Handle dataset_creation_plist() const { return dcpl_; }  // chunking is set per dataset on a copy
  // Creates the groups of `path` ("/a/b") that do not exist yet, time tracking off.
  void ensure_groups(const std::string& path);

  // Attributes of the root group (or of the object at `object_path`).
  void set_attribute(const std::string& name, const std::string& value, const std::string& object_path = "/");
  void set_attribute(const std::string& name, std::int64_t value, const std::string& object_path = "/");
  void set_attribute(const std::string& name, std::uint64_t value, const std::string& object_path = "/");
  void set_attribute(const std::string& name, double value, const std::string& object_path = "/");
  void set_attribute(const std::string& name, const std::vector<std::string>& values,
                     const std::string& object_path = "/");

  // A 1-D chunked, appendable dataset of variable-length UTF-8 strings.
  void write_strings(const std::string& path, const std::vector<std::string>& values, const std::string& unit);

  void close();  // flushes; further use is an error

 private:
  Handle file_ = -1, gcpl_ = -1, dcpl_ = -1;
};

// Run metadata written as root attributes of every results file.
struct RunInfo {
  std::string program_version;
  std::string command_line;
  std::uint64_t seed = 0;
  std::string config_yaml;  // cluster + model + plan as YAML text
};

// Creates the file under a temporary name, calls fill(file), closes and renames it. If fill throws, the
// temporary file is removed and the exception propagates. Root attributes of `info` are written first.
void write_h5_atomically(const std::string& path, const RunInfo& info, const std::function<void(File&)>& fill);

// A table read back (any compound dataset of Float64/Int64/Bool/String members, as Table writes them):
// cells[column][row]. Throws std::runtime_error when the file or dataset cannot be read.
struct TableData {
  std::vector<Column> columns;  // unit and string_width are not read
  std::vector<std::vector<Cell>> cells;
  std::size_t rows = 0;
  int column(const std::string& name) const;  // index; throws std::runtime_error when absent
};
TableData read_table(const std::string& path, const std::string& dataset);

}  // namespace arachne::h5

namespace arachne {

// The `simulate --out` file: /summary (1-row table), /breakdown (cause, seconds), /memory (one row per GPU
// the plan uses), /bytes (link_class, bytes), /warnings (strings). Atomic; throws std::runtime_error.
void write_simulate_h5(const std::string& path, const SimResult& result, const h5::RunInfo& info);

}  // namespace arachne
