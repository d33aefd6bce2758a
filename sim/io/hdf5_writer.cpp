#include "sim/io/hdf5_writer.h"

#include <dlfcn.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "sim/io/atomic_file.h"
#include "sim/io/report_json.h"

namespace arachne::h5 {
namespace {

// HDF5 is loaded with dlopen() when a results file is first written, not linked: Debian's libhdf5 brings
// libcurl, GnuTLS and Kerberos with it (its read-only S3 driver), ~20 ms of dynamic loading and relocation
// at the start of every command, which only the commands that write HDF5 should pay. Each HDF5 function
// and predefined identifier this file uses is named once below and resolved by name. The header's macros
// for predefined identifiers (H5T_NATIVE_DOUBLE, H5P_FILE_CREATE, ...) read library globals directly, so
// the code reads their values from the loaded library instead (hdf5().H5T_NATIVE_DOUBLE_g, ...).
#define ARACHNE_HDF5_FUNCTIONS(X) \
  X(H5open) \
  X(H5Acreate2) \
  X(H5Adelete) \
  X(H5Aexists) \
  X(H5Awrite) \
  X(H5Dcreate2) \
  X(H5Dget_space) \
  X(H5Dget_type) \
  X(H5Dopen2) \
  X(H5Dread) \
  X(H5Dset_extent) \
  X(H5Dwrite) \
  X(H5Eget_auto2) \
  X(H5Eset_auto2) \
  X(H5Fclose) \
  X(H5Fcreate) \
  X(H5Fopen) \
  X(H5Gcreate2) \
  X(H5Idec_ref) \
  X(H5Iis_valid) \
  X(H5Lexists) \
  X(H5Oopen) \
  X(H5Pcopy) \
  X(H5Pcreate) \
  X(H5Pset_chunk) \
  X(H5Pset_fclose_degree) \
  X(H5Pset_libver_bounds) \
  X(H5Pset_obj_track_times) \
  X(H5Screate) \
  X(H5Screate_simple) \
  X(H5Sget_simple_extent_dims) \
  X(H5Sselect_hyperslab) \
  X(H5Tcopy) \
  X(H5Tcreate) \
  X(H5Tenum_create) \
  X(H5Tenum_insert) \
  X(H5Tget_member_class) \
  X(H5Tget_member_name) \
  X(H5Tget_member_type) \
  X(H5Tget_nmembers) \
  X(H5Tget_size) \
  X(H5Tis_variable_str) \
  X(H5free_memory) \
  X(H5Tinsert) \
  X(H5Tset_cset) \
  X(H5Tset_size) \
  X(H5Tset_strpad)
#define ARACHNE_HDF5_GLOBALS(X) \
  X(H5T_NATIVE_DOUBLE_g) \
  X(H5T_NATIVE_INT64_g) \
  X(H5T_NATIVE_UINT64_g) \
  X(H5T_NATIVE_SCHAR_g) \
  X(H5T_STD_I64LE_g) \
  X(H5T_STD_U64LE_g) \
  X(H5T_STD_I8LE_g) \
  X(H5T_IEEE_F64LE_g) \
  X(H5T_C_S1_g) \
  X(H5P_CLS_DATASET_CREATE_ID_g) \
  X(H5P_CLS_FILE_CREATE_ID_g) \
  X(H5P_CLS_FILE_ACCESS_ID_g) \
  X(H5P_CLS_GROUP_CREATE_ID_g)

struct Hdf5Library {
#define ARACHNE_HDF5_FUNCTION_POINTER(name) decltype(&::name) name = nullptr;
  ARACHNE_HDF5_FUNCTIONS(ARACHNE_HDF5_FUNCTION_POINTER)
#undef ARACHNE_HDF5_FUNCTION_POINTER
#define ARACHNE_HDF5_GLOBAL_ID(name) hid_t name = -1;
  ARACHNE_HDF5_GLOBALS(ARACHNE_HDF5_GLOBAL_ID)
#undef ARACHNE_HDF5_GLOBAL_ID
};

// H5F_ACC_TRUNC and H5F_ACC_RDONLY without the H5check()/H5open() calls their macros make (H5Fpublic.h).
constexpr unsigned kAccessTruncate = 0x0002u;
constexpr unsigned kAccessReadOnly = 0x0000u;

Hdf5Library load_hdf5() {
  // The library CMake found (ARACHNE_HDF5_LIBRARY); RTLD_LOCAL keeps its symbols out of the global scope.
  void* handle = dlopen(ARACHNE_HDF5_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw std::runtime_error(std::string("cannot load the HDF5 library: ") + (why ? why : ARACHNE_HDF5_LIBRARY));
  }
  const auto resolve = [handle](const char* name) {
    void* symbol = dlsym(handle, name);
    if (symbol == nullptr) throw std::runtime_error(std::string("the HDF5 library has no symbol ") + name);
    return symbol;
  };
  Hdf5Library lib;
#define ARACHNE_HDF5_RESOLVE_FUNCTION(name) lib.name = reinterpret_cast<decltype(lib.name)>(resolve(#name));
  ARACHNE_HDF5_FUNCTIONS(ARACHNE_HDF5_RESOLVE_FUNCTION)
#undef ARACHNE_HDF5_RESOLVE_FUNCTION
  // H5open() initialises the predefined identifiers, which are read after it.
  if (lib.H5open() < 0) throw std::runtime_error("HDF5: cannot initialise the library");
  // A program that links HDF5 itself (the tests do) holds copy-relocated copies of these globals, and
  // those are the ones the library updates: look in the program's global scope first.
  const auto live_global = [&resolve](const char* name) {
    void* symbol = dlsym(RTLD_DEFAULT, name);
    return *static_cast<const hid_t*>(symbol != nullptr ? symbol : resolve(name));
  };
#define ARACHNE_HDF5_READ_GLOBAL(name) lib.name = live_global(#name);
  ARACHNE_HDF5_GLOBALS(ARACHNE_HDF5_READ_GLOBAL)
#undef ARACHNE_HDF5_READ_GLOBAL
  return lib;
}

// Loaded once, on first use (thread-safe initialisation of a function-local static).
const Hdf5Library& hdf5() {
  static const Hdf5Library lib = load_hdf5();
  return lib;
}


// HDF5 prints its error stack to stderr by default; the writer reports errors as exceptions instead.
// Saves and restores the caller's setting around each public operation.
class QuietErrors {
 public:
  QuietErrors() {
    hdf5().H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    hdf5().H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietErrors() { hdf5().H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

hid_t check(hid_t id, const std::string& what) {
  if (id < 0) throw std::runtime_error("HDF5: cannot " + what);
  return id;
}
void check_status(herr_t st, const std::string& what) {
  if (st < 0) throw std::runtime_error("HDF5: cannot " + what);
}

// Closes an HDF5 identifier of any kind when it goes out of scope.
class Id {
 public:
  Id(hid_t id, const std::string& what) : id_(check(id, what)) {}
  ~Id() {
    if (id_ >= 0 && hdf5().H5Iis_valid(id_) > 0) hdf5().H5Idec_ref(id_);
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  hid_t get() const { return id_; }

 private:
  hid_t id_;
};

void close_id(Handle& h) {
  if (h >= 0 && hdf5().H5Iis_valid(static_cast<hid_t>(h)) > 0) hdf5().H5Idec_ref(static_cast<hid_t>(h));
  h = -1;
}

hid_t vlen_string_type() {
  const hid_t t = check(hdf5().H5Tcopy(hdf5().H5T_C_S1_g), "copy string type");
  hdf5().H5Tset_size(t, H5T_VARIABLE);
  hdf5().H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}

hid_t fixed_string_type(int width) {
  const hid_t t = check(hdf5().H5Tcopy(hdf5().H5T_C_S1_g), "copy string type");
  hdf5().H5Tset_size(t, static_cast<size_t>(width));
  hdf5().H5Tset_strpad(t, H5T_STR_NULLPAD);
  hdf5().H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}

// h5py's boolean convention: an 8-bit enum {FALSE = 0, TRUE = 1}.
hid_t bool_type(hid_t base) {
  const hid_t t = check(hdf5().H5Tenum_create(base), "create bool enum");
  const signed char f = 0, tr = 1;
  hdf5().H5Tenum_insert(t, "FALSE", &f);
  hdf5().H5Tenum_insert(t, "TRUE", &tr);
  return t;
}

std::size_t mem_size(const Column& c) {
  switch (c.type) {
    case ColumnType::Float64: return sizeof(double);
    case ColumnType::Int64: return sizeof(std::int64_t);
    case ColumnType::Bool: return 1;
    case ColumnType::String: return c.string_width > 0 ? static_cast<std::size_t>(c.string_width) : sizeof(char*);
  }
  return 0;
}

// Element type of a column in memory (native) or in the file (fixed little-endian, packed).
hid_t column_type(const Column& c, bool in_file) {
  switch (c.type) {
    case ColumnType::Float64: return check(hdf5().H5Tcopy(in_file ? hdf5().H5T_IEEE_F64LE_g : hdf5().H5T_NATIVE_DOUBLE_g), "copy type");
    case ColumnType::Int64: return check(hdf5().H5Tcopy(in_file ? hdf5().H5T_STD_I64LE_g : hdf5().H5T_NATIVE_INT64_g), "copy type");
    case ColumnType::Bool: return bool_type(in_file ? hdf5().H5T_STD_I8LE_g : hdf5().H5T_NATIVE_SCHAR_g);
    case ColumnType::String: return c.string_width > 0 ? fixed_string_type(c.string_width) : vlen_string_type();
  }
  return -1;
}

std::string parent_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos || slash == 0 ? std::string("/") : path.substr(0, slash);
}

}  // namespace

// ---------------------------------------------------------------------------------------------- File

File::File(const std::string& path) {
  const QuietErrors quiet;
  // Root group is created from the file creation list, which is also an object creation list.
  const Id fcpl(hdf5().H5Pcreate(hdf5().H5P_CLS_FILE_CREATE_ID_g), "create file creation list");
  check_status(hdf5().H5Pset_obj_track_times(fcpl.get(), 0), "disable time tracking");
  const Id fapl(hdf5().H5Pcreate(hdf5().H5P_CLS_FILE_ACCESS_ID_g), "create file access list");
  // Pin the on-disk format (v1.8 object headers: no time stamps when tracking is off; dense attributes
  // for long config text), so the bytes do not depend on library defaults.
  check_status(hdf5().H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18), "set format bounds");
  // Closing the file closes every object still open in it, so the file is complete before the rename.
  check_status(hdf5().H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG), "set close degree");
  file_ = hdf5().H5Fcreate(path.c_str(), kAccessTruncate, fcpl.get(), fapl.get());
  if (file_ < 0) throw std::runtime_error("cannot create HDF5 file '" + path + "'");
  gcpl_ = check(hdf5().H5Pcreate(hdf5().H5P_CLS_GROUP_CREATE_ID_g), "create group creation list");
  check_status(hdf5().H5Pset_obj_track_times(static_cast<hid_t>(gcpl_), 0), "disable time tracking");
  dcpl_ = check(hdf5().H5Pcreate(hdf5().H5P_CLS_DATASET_CREATE_ID_g), "create dataset creation list");
  check_status(hdf5().H5Pset_obj_track_times(static_cast<hid_t>(dcpl_), 0), "disable time tracking");
}

File::~File() {
  const QuietErrors quiet;
  close_id(dcpl_);
  close_id(gcpl_);
  if (file_ >= 0) hdf5().H5Fclose(static_cast<hid_t>(file_));
  file_ = -1;
}

void File::close() {
  const QuietErrors quiet;
  close_id(dcpl_);
  close_id(gcpl_);
  if (file_ >= 0) {
    const herr_t st = hdf5().H5Fclose(static_cast<hid_t>(file_));
    file_ = -1;
    check_status(st, "close file");
  }
}

void File::ensure_groups(const std::string& path) {
  const QuietErrors quiet;
  std::string prefix;
  std::size_t pos = 1;
  while (pos <= path.size()) {
    const auto next = path.find('/', pos);
    const auto end = next == std::string::npos ? path.size() : next;
    if (end > pos) {
      prefix += "/" + path.substr(pos, end - pos);
      if (hdf5().H5Lexists(static_cast<hid_t>(file_), prefix.c_str(), H5P_DEFAULT) <= 0) {
        const Id g(hdf5().H5Gcreate2(static_cast<hid_t>(file_), prefix.c_str(), H5P_DEFAULT,
                              static_cast<hid_t>(gcpl_), H5P_DEFAULT),
                   "create group " + prefix);
      }
    }
    pos = end + 1;
  }
}

namespace {

void write_attribute(hid_t file, const std::string& object_path, const std::string& name, hid_t mem_type,
                     hid_t file_type, hid_t space, const void* data) {
  const Id obj(hdf5().H5Oopen(file, object_path.c_str(), H5P_DEFAULT), "open " + object_path);
  if (hdf5().H5Aexists(obj.get(), name.c_str()) > 0) check_status(hdf5().H5Adelete(obj.get(), name.c_str()), "replace attribute " + name);
  const Id attr(hdf5().H5Acreate2(obj.get(), name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT),
                "create attribute " + name);
  check_status(hdf5().H5Awrite(attr.get(), mem_type, data), "write attribute " + name);
}

}  // namespace

void File::set_attribute(const std::string& name, const std::string& value, const std::string& object_path) {
  const QuietErrors quiet;
  const Id type(vlen_string_type(), "string type");
  const Id space(hdf5().H5Screate(H5S_SCALAR), "create scalar space");
  const char* p = value.c_str();
  write_attribute(static_cast<hid_t>(file_), object_path, name, type.get(), type.get(), space.get(), &p);
}

void File::set_attribute(const std::string& name, std::int64_t value, const std::string& object_path) {
  const QuietErrors quiet;
  const Id space(hdf5().H5Screate(H5S_SCALAR), "create scalar space");
  write_attribute(static_cast<hid_t>(file_), object_path, name, hdf5().H5T_NATIVE_INT64_g, hdf5().H5T_STD_I64LE_g, space.get(), &value);
}

void File::set_attribute(const std::string& name, std::uint64_t value, const std::string& object_path) {
  const QuietErrors quiet;
  const Id space(hdf5().H5Screate(H5S_SCALAR), "create scalar space");
  write_attribute(static_cast<hid_t>(file_), object_path, name, hdf5().H5T_NATIVE_UINT64_g, hdf5().H5T_STD_U64LE_g, space.get(), &value);
}

void File::set_attribute(const std::string& name, double value, const std::string& object_path) {
  const QuietErrors quiet;
  const Id space(hdf5().H5Screate(H5S_SCALAR), "create scalar space");
  write_attribute(static_cast<hid_t>(file_), object_path, name, hdf5().H5T_NATIVE_DOUBLE_g, hdf5().H5T_IEEE_F64LE_g, space.get(), &value);
}

void File::set_attribute(const std::string& name, const std::vector<std::string>& values,
                         const std::string& object_path) {
  const QuietErrors quiet;
  const Id type(vlen_string_type(), "string type");
  const hsize_t n = values.size();
  const Id space(hdf5().H5Screate_simple(1, &n, nullptr), "create attribute space");
  std::vector<const char*> ptrs;
  ptrs.reserve(values.size());
  for (const auto& v : values) ptrs.push_back(v.c_str());
  write_attribute(static_cast<hid_t>(file_), object_path, name, type.get(), type.get(), space.get(),
                  ptrs.empty() ? nullptr : ptrs.data());
}

void File::write_strings(const std::string& path, const std::vector<std::string>& values, const std::string& unit) {
  {
    const QuietErrors quiet;
    ensure_groups(parent_of(path));
    const Id type(vlen_string_type(), "string type");
    const hsize_t n = values.size(), maxdim = H5S_UNLIMITED, chunk = 64;
    const Id space(hdf5().H5Screate_simple(1, &n, &maxdim), "create space");
    const Id dcpl(hdf5().H5Pcopy(static_cast<hid_t>(dcpl_)), "copy dataset creation list");
    check_status(hdf5().H5Pset_chunk(dcpl.get(), 1, &chunk), "set chunk");
    const Id dset(hdf5().H5Dcreate2(static_cast<hid_t>(file_), path.c_str(), type.get(), space.get(), H5P_DEFAULT,
                             dcpl.get(), H5P_DEFAULT),
                  "create dataset " + path);
    if (n > 0) {
      std::vector<const char*> ptrs;
      for (const auto& v : values) ptrs.push_back(v.c_str());
      check_status(hdf5().H5Dwrite(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()), "write " + path);
    }
  }
  set_attribute("units", unit, path);
}

// --------------------------------------------------------------------------------------------- Table

Table::Table(File& file, const std::string& path, std::vector<Column> columns, std::uint64_t chunk_rows)
    : columns_(std::move(columns)) {
  if (columns_.empty()) throw std::invalid_argument("table " + path + " has no columns");
  const QuietErrors quiet;
  file.ensure_groups(parent_of(path));
  // In memory every member is 8-byte aligned (zeroed padding); in the file the compound is packed.
  std::size_t file_size = 0;
  for (const auto& c : columns_) {
    offsets_.push_back(row_size_);
    row_size_ += (mem_size(c) + 7) / 8 * 8;
    file_size += mem_size(c);
  }
  mem_type_ = check(hdf5().H5Tcreate(H5T_COMPOUND, row_size_), "create compound type");
  const Id ftype(hdf5().H5Tcreate(H5T_COMPOUND, file_size), "create compound type");
  std::size_t foff = 0;
  for (std::size_t i = 0; i < columns_.size(); ++i) {
    const Id mt(column_type(columns_[i], false), "column type");
    const Id ft(column_type(columns_[i], true), "column type");
    check_status(hdf5().H5Tinsert(static_cast<hid_t>(mem_type_), columns_[i].name.c_str(), offsets_[i], mt.get()),
                 "add column " + columns_[i].name);
    check_status(hdf5().H5Tinsert(ftype.get(), columns_[i].name.c_str(), foff, ft.get()), "add column " + columns_[i].name);
    foff += mem_size(columns_[i]);
  }
  const hsize_t zero = 0, maxdim = H5S_UNLIMITED, chunk = std::max<hsize_t>(1, chunk_rows);
  const Id space(hdf5().H5Screate_simple(1, &zero, &maxdim), "create space");
  const Id dcpl(hdf5().H5Pcopy(static_cast<hid_t>(file.dataset_creation_plist())), "copy dataset creation list");
  check_status(hdf5().H5Pset_chunk(dcpl.get(), 1, &chunk), "set chunk");
  dset_ = check(hdf5().H5Dcreate2(static_cast<hid_t>(file.id()), path.c_str(), ftype.get(), space.get(), H5P_DEFAULT,
                           dcpl.get(), H5P_DEFAULT),
                "create dataset " + path);
  std::vector<std::string> units;
  for (const auto& c : columns_) units.push_back(c.unit);
  file.set_attribute("units", units, path);
}

Table::Table(Table&& o) noexcept
    : columns_(std::move(o.columns_)),
      offsets_(std::move(o.offsets_)),
      row_size_(o.row_size_),
      dset_(o.dset_),
      mem_type_(o.mem_type_),
      rows_(o.rows_) {
  o.dset_ = -1;
  o.mem_type_ = -1;
}

Table::~Table() {
  const QuietErrors quiet;
  close_id(dset_);
  close_id(mem_type_);
}

void Table::append(const std::vector<Row>& rows) {
  if (rows.empty()) return;
  std::vector<unsigned char> buf(rows.size() * row_size_, 0);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    if (row.size() != columns_.size())
      throw std::invalid_argument("row has " + std::to_string(row.size()) + " cells, table has " +
                                  std::to_string(columns_.size()) + " columns");
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      unsigned char* dst = buf.data() + r * row_size_ + offsets_[c];
      const Column& col = columns_[c];
      const Cell& cell = row[c];
      const auto mismatch = [&] { return std::invalid_argument("cell of wrong type in column " + col.name); };
      switch (col.type) {
        case ColumnType::Float64: {
          double v = 0;
          if (const auto* d = std::get_if<double>(&cell)) v = *d;
          else if (const auto* i = std::get_if<std::int64_t>(&cell)) v = static_cast<double>(*i);
          else throw mismatch();
          std::memcpy(dst, &v, sizeof v);
          break;
        }
        case ColumnType::Int64: {
          const auto* i = std::get_if<std::int64_t>(&cell);
          if (!i) throw mismatch();
          std::memcpy(dst, i, sizeof *i);
          break;
        }
        case ColumnType::Bool: {
          const auto* b = std::get_if<bool>(&cell);
          if (!b) throw mismatch();
          const signed char v = *b ? 1 : 0;
          std::memcpy(dst, &v, 1);
          break;
        }
        case ColumnType::String: {
          const auto* s = std::get_if<std::string>(&cell);
          if (!s) throw mismatch();
          if (col.string_width > 0) {
            std::memcpy(dst, s->data(), std::min<std::size_t>(s->size(), static_cast<std::size_t>(col.string_width)));
          } else {
            const char* p = s->c_str();  // points into `rows`, alive during the write
            std::memcpy(dst, &p, sizeof p);
          }
          break;
        }
      }
    }
  }
  const QuietErrors quiet;
  const hid_t dset = static_cast<hid_t>(dset_);
  const hsize_t start = rows_, count = rows.size(), total = rows_ + rows.size();
  check_status(hdf5().H5Dset_extent(dset, &total), "extend table");
  const Id fspace(hdf5().H5Dget_space(dset), "get table space");
  check_status(hdf5().H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr), "select rows");
  const Id mspace(hdf5().H5Screate_simple(1, &count, nullptr), "create memory space");
  check_status(hdf5().H5Dwrite(dset, static_cast<hid_t>(mem_type_), mspace.get(), fspace.get(), H5P_DEFAULT, buf.data()),
               "write rows");
  rows_ = total;
}

// ------------------------------------------------------------------------------------ atomic writing

void write_h5_atomically(const std::string& path, const RunInfo& info, const std::function<void(File&)>& fill) {
  write_file_atomically(path, [&](const std::string& tmp) {
    File file(tmp);
    file.set_attribute("program_version", info.program_version);
    file.set_attribute("command_line", info.command_line);
    file.set_attribute("seed", info.seed);
    file.set_attribute("config_yaml", info.config_yaml);
    fill(file);
    file.close();
  });
}


// ------------------------------------------------------------------------------------------ reading

namespace {

ColumnType column_type_of(H5T_class_t cls, const std::string& dataset, const std::string& name) {
  switch (cls) {
    case H5T_FLOAT: return ColumnType::Float64;
    case H5T_INTEGER: return ColumnType::Int64;
    case H5T_ENUM: return ColumnType::Bool;
    case H5T_STRING: return ColumnType::String;
    default: throw std::runtime_error("HDF5: column " + name + " of " + dataset + " has a type the reader does not know");
  }
}

// One column of a compound dataset, read through a one-member memory compound (HDF5 matches by name).
std::vector<Cell> read_column(hid_t dset, hid_t file_type, int member, const Column& col, std::size_t rows) {
  std::vector<Cell> cells;
  cells.reserve(rows);
  const auto read_into = [&](hid_t elem, std::size_t elem_size, void* buf) {
    const Id mem(hdf5().H5Tcreate(H5T_COMPOUND, elem_size), "create compound type");
    check_status(hdf5().H5Tinsert(mem.get(), col.name.c_str(), 0, elem), "add column " + col.name);
    check_status(hdf5().H5Dread(dset, mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf), "read column " + col.name);
  };
  switch (col.type) {
    case ColumnType::Float64: {
      std::vector<double> v(rows);
      if (rows > 0) read_into(hdf5().H5T_NATIVE_DOUBLE_g, sizeof(double), v.data());
      for (double x : v) cells.emplace_back(x);
      break;
    }
    case ColumnType::Int64: {
      std::vector<std::int64_t> v(rows);
      if (rows > 0) read_into(hdf5().H5T_NATIVE_INT64_g, sizeof(std::int64_t), v.data());
      for (std::int64_t x : v) cells.emplace_back(x);
      break;
    }
    case ColumnType::Bool: {
      std::vector<signed char> v(rows);
      const Id t(bool_type(hdf5().H5T_NATIVE_SCHAR_g), "bool type");
      if (rows > 0) read_into(t.get(), 1, v.data());
      for (signed char x : v) cells.emplace_back(x != 0);
      break;
    }
    case ColumnType::String: {
      const Id member_type(hdf5().H5Tget_member_type(file_type, static_cast<unsigned>(member)), "member type");
      if (hdf5().H5Tis_variable_str(member_type.get()) > 0) {
        std::vector<char*> v(rows, nullptr);
        const Id t(vlen_string_type(), "string type");
        if (rows > 0) read_into(t.get(), sizeof(char*), v.data());
        for (char* p : v) {
          cells.emplace_back(std::string(p != nullptr ? p : ""));
          if (p != nullptr) hdf5().H5free_memory(p);
        }
      } else {
        const std::size_t width = hdf5().H5Tget_size(member_type.get());
        std::vector<char> v(rows * width, 0);
        const Id t(fixed_string_type(static_cast<int>(width)), "string type");
        if (rows > 0) read_into(t.get(), width, v.data());
        for (std::size_t r = 0; r < rows; ++r) {
          const char* p = v.data() + r * width;
          cells.emplace_back(std::string(p, strnlen(p, width)));
        }
      }
      break;
    }
  }
  return cells;
}

}  // namespace

TableData read_table(const std::string& path, const std::string& dataset) {
  const QuietErrors quiet;
  const hid_t raw = hdf5().H5Fopen(path.c_str(), kAccessReadOnly, H5P_DEFAULT);
  if (raw < 0) throw std::runtime_error("cannot open HDF5 file '" + path + "'");
  const Id file(raw, "open " + path);
  const Id dset(hdf5().H5Dopen2(file.get(), dataset.c_str(), H5P_DEFAULT), "open dataset " + dataset + " in " + path);
  const Id ftype(hdf5().H5Dget_type(dset.get()), "get type of " + dataset);
  const Id space(hdf5().H5Dget_space(dset.get()), "get space of " + dataset);
  hsize_t rows = 0;
  check_status(hdf5().H5Sget_simple_extent_dims(space.get(), &rows, nullptr), "get size of " + dataset);
  TableData t;
  const int members = hdf5().H5Tget_nmembers(ftype.get());
  if (members < 0) throw std::runtime_error("HDF5: " + dataset + " is not a table");
  for (int m = 0; m < members; ++m) {
    char* name = hdf5().H5Tget_member_name(ftype.get(), static_cast<unsigned>(m));
    Column col;
    col.name = name != nullptr ? name : "";
    if (name != nullptr) hdf5().H5free_memory(name);
    col.type = column_type_of(hdf5().H5Tget_member_class(ftype.get(), static_cast<unsigned>(m)), dataset, col.name);
    t.columns.push_back(col);
    t.cells.push_back(read_column(dset.get(), ftype.get(), m, col, static_cast<std::size_t>(rows)));
  }
  t.rows = static_cast<std::size_t>(rows);
  return t;
}

int TableData::column(const std::string& name) const {
  for (std::size_t i = 0; i < columns.size(); ++i)
    if (columns[i].name == name) return static_cast<int>(i);
  throw std::runtime_error("table has no column " + name);
}

}  // namespace arachne::h5

namespace arachne {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;  // GiB = 2^30 bytes (DESIGN.md "Units")
constexpr const char* kLinkClassNames[kLinkClasses] = {"nvlink", "pcie", "nic", "spine"};
}  // namespace

void write_simulate_h5(const std::string& path, const SimResult& r, const h5::RunInfo& info) {
  using h5::Column;
  using h5::ColumnType;
  using h5::Row;
  const bool timed = has_timing(r);
  // Timing fields that were not simulated (out of memory) are NaN, as they are null in the JSON report.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto t = [&](double v) { return timed ? v : nan; };
  h5::write_h5_atomically(path, info, [&](h5::File& f) {
    {
      h5::Table summary(f, "/summary",
                        {{"iteration_time_s", ColumnType::Float64, "s"},
                         {"tokens_per_s", ColumnType::Float64, "tokens/s"},
                         {"samples_per_s", ColumnType::Float64, "samples/s"},
                         {"tflops_per_gpu", ColumnType::Float64, "TFLOP/s"},
                         {"mfu", ColumnType::Float64, "1"},
                         {"mfu_cluster", ColumnType::Float64, "1"},
                         {"oom", ColumnType::Bool, "-"},
                         {"peak_memory_gib", ColumnType::Float64, "GiB"},
                         {"peak_memory_gpu", ColumnType::String, "-"},
                         {"events", ColumnType::Int64, "1"},
                         {"sim_wall_s", ColumnType::Float64, "s"},
                         {"dropped_tokens", ColumnType::Float64, "tokens"},
                         {"global_batch", ColumnType::Int64, "samples"},
                         {"gpus_used", ColumnType::Int64, "1"}},
                        1);
      summary.append({Row{t(r.iteration_time_s), t(r.tokens_per_s), t(r.samples_per_s), t(r.tflops_per_gpu),
                          t(r.mfu), t(r.mfu_cluster), r.oom, r.peak_memory_gib, r.peak_memory_gpu,
                          static_cast<std::int64_t>(r.events), r.sim_wall_s, r.dropped_tokens,
                          static_cast<std::int64_t>(r.global_batch), static_cast<std::int64_t>(r.gpus_used)}});
    }
    {
      h5::Table breakdown(f, "/breakdown", {{"cause", ColumnType::String, "-"}, {"seconds", ColumnType::Float64, "s"}}, 8);
      const Breakdown& b = r.breakdown;
      breakdown.append({Row{std::string("compute"), t(b.compute)}, Row{std::string("tp_comm"), t(b.tp_comm)},
                        Row{std::string("pp_comm"), t(b.pp_comm)}, Row{std::string("dp_comm"), t(b.dp_comm)},
                        Row{std::string("ep_comm"), t(b.ep_comm)}, Row{std::string("bubble"), t(b.bubble)},
                        Row{std::string("wait"), t(b.wait)},
                        Row{std::string("optimizer"), t(b.optimizer)}});
    }
    {
      h5::Table memory(f, "/memory",
                       {{"gpu", ColumnType::String, "-"},
                        {"type", ColumnType::String, "-"},
                        {"capacity_gib", ColumnType::Float64, "GiB"},
                        {"weights_gib", ColumnType::Float64, "GiB"},
                        {"gradients_gib", ColumnType::Float64, "GiB"},
                        {"optimizer_gib", ColumnType::Float64, "GiB"},
                        {"activations_gib", ColumnType::Float64, "GiB"},
                        {"other_gib", ColumnType::Float64, "GiB"},
                        {"total_gib", ColumnType::Float64, "GiB"}});
      std::vector<Row> rows;
      for (const auto& g : r.per_gpu_memory) {
        rows.push_back(Row{g.label, g.gpu_type, g.capacity_bytes / kGiB, g.usage.weights / kGiB,
                           g.usage.gradients / kGiB, g.usage.optimizer / kGiB, g.usage.activations / kGiB,
                           g.usage.other / kGiB, g.usage.total() / kGiB});
        if (rows.size() == 1024) {
          memory.append(rows);
          rows.clear();
        }
      }
      memory.append(rows);
    }
    {
      h5::Table bytes(f, "/bytes", {{"link_class", ColumnType::String, "-"}, {"bytes", ColumnType::Float64, "B"}}, 4);
      std::vector<Row> rows;
      for (int c = 0; c < kLinkClasses; ++c) rows.push_back(Row{std::string(kLinkClassNames[c]), r.bytes[c]});
      bytes.append(rows);
    }
    f.write_strings("/warnings", r.warnings, "-");
  });
}

}  // namespace arachne
