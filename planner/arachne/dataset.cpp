#include "planner/arachne/dataset.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>

#include "sim/io/numbers.h"

namespace arachne::planner {
namespace {

using nlohmann::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// JSON has no NaN: a missing time is written as null.
json number_or_null(double x) { return std::isnan(x) ? json(nullptr) : json(x); }
double number_or_nan(const json& j) { return j.is_null() ? kNaN : j.get<double>(); }

std::string tokens_text(const std::vector<int>& tokens) {
  std::string s;
  for (int t : tokens) s += (s.empty() ? "" : " ") + std::to_string(t);
  return s;
}

// The token ids of tokens_text's form (single spaces between decimal ids), each a valid id of the file's
// vocabulary (`ids`); throws InputError(where, ...) otherwise.
std::vector<int> tokens_of(const std::string& text, limits::IntRange ids, const std::string& where) {
  std::vector<int> out;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t space = std::min(text.find(' ', pos), text.size());
    out.push_back(read_int(std::string_view(text).substr(pos, space - pos), ids, where));
    pos = space + 1;
  }
  return out;
}

template <class T>
const T& cell(const h5::TableData& t, int column, std::size_t row) {
  return std::get<T>(t.cells[static_cast<std::size_t>(column)][row]);
}

// Consecutive rows of a table that belong to one config (tables are ordered by config).
std::map<std::int64_t, std::vector<std::size_t>> rows_by_config(const h5::TableData& t) {
  std::map<std::int64_t, std::vector<std::size_t>> rows;
  const int c = t.column("config");
  for (std::size_t r = 0; r < t.rows; ++r) rows[cell<std::int64_t>(t, c, r)].push_back(r);
  return rows;
}

std::vector<h5::Column> feature_columns(const std::vector<std::string>& names) {
  std::vector<h5::Column> cols;
  for (const std::string& n : names) cols.push_back({n, h5::ColumnType::Float64, "1"});
  return cols;
}

void write_tables(h5::File& f, const DatasetSchema& schema, const std::vector<ConfigRecord>& records) {
  const auto i64 = [](auto x) { return static_cast<std::int64_t>(x); };
  h5::Table vocab(f, "/vocabulary", {{"id", h5::ColumnType::Int64, "1"}, {"token", h5::ColumnType::String, "-"}});
  std::vector<h5::Row> vrows;
  for (std::size_t i = 0; i < schema.vocabulary.size(); ++i) vrows.push_back({i64(i), schema.vocabulary[i]});
  vocab.append(vrows);

  h5::Table configs(f, "/configs",
                    {{"config", h5::ColumnType::Int64, "1"}, {"family", h5::ColumnType::String, "-"},
                     {"model", h5::ColumnType::String, "-"}, {"global_batch", h5::ColumnType::Int64, "1"},
                     {"gpus", h5::ColumnType::Int64, "1"}, {"cluster_yaml", h5::ColumnType::String, "-"},
                     {"search", h5::ColumnType::String, "-"}, {"search_complete", h5::ColumnType::Bool, "-"},
                     {"best_simulated_s", h5::ColumnType::Float64, "s"}, {"oracle_s", h5::ColumnType::Float64, "s"}});
  std::vector<h5::Column> gcols{{"config", h5::ColumnType::Int64, "1"}, {"slot", h5::ColumnType::Int64, "1"}};
  for (const auto& c : feature_columns(schema.group_features)) gcols.push_back(c);
  h5::Table groups(f, "/groups", gcols);
  std::vector<h5::Column> glcols{{"config", h5::ColumnType::Int64, "1"}};
  for (const auto& c : feature_columns(schema.global_features)) glcols.push_back(c);
  h5::Table globals(f, "/globals", glcols);
  h5::Table labels(f, "/labels",
                   {{"config", h5::ColumnType::Int64, "1"}, {"rank", h5::ColumnType::Int64, "1"},
                    {"template", h5::ColumnType::String, "-"}, {"tokens", h5::ColumnType::String, "-"},
                    {"simulated_s", h5::ColumnType::Float64, "s"}, {"estimated_s", h5::ColumnType::Float64, "s"}});
  h5::Table cands(f, "/candidates",
                  {{"config", h5::ColumnType::Int64, "1"}, {"template", h5::ColumnType::String, "-"},
                   {"estimated_s", h5::ColumnType::Float64, "s"}, {"simulated_s", h5::ColumnType::Float64, "s"},
                   {"fits", h5::ColumnType::Bool, "-"}});

  for (const ConfigRecord& r : records) {
    const std::int64_t id = i64(r.index);
    const double best = r.labels.empty() ? kNaN : r.labels.front().simulated_s;
    configs.append({{id, r.family, r.model, i64(r.global_batch), i64(r.gpus), r.cluster_yaml, r.search,
                     r.search_complete, best, r.oracle_s}});
    std::vector<h5::Row> rows;
    for (std::size_t s = 0; s < r.group_features.size(); ++s) {
      if (r.group_features[s].size() != schema.group_features.size())
        throw std::invalid_argument("config " + std::to_string(r.index) + ": group feature count differs from the schema");
      h5::Row row{id, i64(s)};
      for (double x : r.group_features[s]) row.emplace_back(x);
      rows.push_back(std::move(row));
    }
    groups.append(rows);
    if (r.global_features.size() != schema.global_features.size())
      throw std::invalid_argument("config " + std::to_string(r.index) + ": global feature count differs from the schema");
    h5::Row grow{id};
    for (double x : r.global_features) grow.emplace_back(x);
    globals.append({grow});
    rows.clear();
    for (std::size_t k = 0; k < r.labels.size(); ++k) {
      const LabelRecord& l = r.labels[k];
      rows.push_back({id, i64(k), l.template_text, tokens_text(l.tokens), l.simulated_s, l.estimated_s});
    }
    labels.append(rows);
    rows.clear();
    for (const CandidateRecord& c : r.candidates) rows.push_back({id, c.template_text, c.estimated_s, c.simulated_s, c.fits});
    cands.append(rows);
  }
}

}  // namespace

std::string record_to_json(const ConfigRecord& r) {
  json j;
  j["index"] = r.index;
  j["family"] = r.family;
  j["model"] = r.model;
  j["global_batch"] = r.global_batch;
  j["gpus"] = r.gpus;
  j["cluster_yaml"] = r.cluster_yaml;
  j["search"] = r.search;
  j["search_complete"] = r.search_complete;
  j["oracle_s"] = number_or_null(r.oracle_s);
  j["group_features"] = r.group_features;
  j["global_features"] = r.global_features;
  j["labels"] = json::array();
  for (const LabelRecord& l : r.labels)
    j["labels"].push_back({{"template", l.template_text}, {"tokens", l.tokens},
                           {"simulated_s", number_or_null(l.simulated_s)}, {"estimated_s", number_or_null(l.estimated_s)}});
  j["candidates"] = json::array();
  for (const CandidateRecord& c : r.candidates)
    j["candidates"].push_back({{"template", c.template_text}, {"estimated_s", number_or_null(c.estimated_s)},
                               {"simulated_s", number_or_null(c.simulated_s)}, {"fits", c.fits}});
  return j.dump();
}

ConfigRecord record_from_json(const std::string& text) {
  try {
    const json j = json::parse(text);
    ConfigRecord r;
    r.index = j.at("index").get<std::uint64_t>();
    r.family = j.at("family").get<std::string>();
    r.model = j.at("model").get<std::string>();
    r.global_batch = j.at("global_batch").get<long>();
    r.gpus = j.at("gpus").get<int>();
    r.cluster_yaml = j.at("cluster_yaml").get<std::string>();
    r.search = j.at("search").get<std::string>();
    r.search_complete = j.at("search_complete").get<bool>();
    r.oracle_s = number_or_nan(j.at("oracle_s"));
    r.group_features = j.at("group_features").get<std::vector<std::vector<double>>>();
    r.global_features = j.at("global_features").get<std::vector<double>>();
    for (const json& l : j.at("labels"))
      r.labels.push_back({l.at("template").get<std::string>(), l.at("tokens").get<std::vector<int>>(),
                          number_or_nan(l.at("simulated_s")), number_or_nan(l.at("estimated_s"))});
    for (const json& c : j.at("candidates"))
      r.candidates.push_back({c.at("template").get<std::string>(), number_or_nan(c.at("estimated_s")),
                              number_or_nan(c.at("simulated_s")), c.at("fits").get<bool>()});
    return r;
  } catch (const json::exception& e) {
    throw std::runtime_error(std::string("malformed dataset shard: ") + e.what());
  }
}

void write_dataset_h5(const std::string& path, const DatasetSchema& schema, const std::vector<ConfigRecord>& records,
                      const h5::RunInfo& info) {
  h5::write_h5_atomically(path, info, [&](h5::File& f) { write_tables(f, schema, records); });
}

std::vector<ConfigRecord> read_dataset_h5(const std::string& path, DatasetSchema* schema) {
  const h5::TableData vocab = h5::read_table(path, "/vocabulary");
  const h5::TableData configs = h5::read_table(path, "/configs");
  const h5::TableData groups = h5::read_table(path, "/groups");
  const h5::TableData globals = h5::read_table(path, "/globals");
  const h5::TableData labels = h5::read_table(path, "/labels");
  const h5::TableData cands = h5::read_table(path, "/candidates");
  const limits::IntRange token_ids{0, static_cast<long long>(vocab.rows) - 1};
  if (schema != nullptr) {
    *schema = {};
    for (std::size_t r = 0; r < vocab.rows; ++r) schema->vocabulary.push_back(cell<std::string>(vocab, vocab.column("token"), r));
    for (std::size_t c = 2; c < groups.columns.size(); ++c) schema->group_features.push_back(groups.columns[c].name);
    for (std::size_t c = 1; c < globals.columns.size(); ++c) schema->global_features.push_back(globals.columns[c].name);
  }
  const auto group_rows = rows_by_config(groups), global_rows = rows_by_config(globals);
  const auto label_rows = rows_by_config(labels), cand_rows = rows_by_config(cands);
  const auto rows_of = [](const auto& m, std::int64_t id) {
    const auto it = m.find(id);
    return it == m.end() ? std::vector<std::size_t>{} : it->second;
  };
  std::vector<ConfigRecord> out;
  for (std::size_t r = 0; r < configs.rows; ++r) {
    ConfigRecord rec;
    const auto id = cell<std::int64_t>(configs, configs.column("config"), r);
    rec.index = static_cast<std::uint64_t>(id);
    rec.family = cell<std::string>(configs, configs.column("family"), r);
    rec.model = cell<std::string>(configs, configs.column("model"), r);
    rec.global_batch = static_cast<long>(cell<std::int64_t>(configs, configs.column("global_batch"), r));
    rec.gpus = static_cast<int>(cell<std::int64_t>(configs, configs.column("gpus"), r));
    rec.cluster_yaml = cell<std::string>(configs, configs.column("cluster_yaml"), r);
    rec.search = cell<std::string>(configs, configs.column("search"), r);
    rec.search_complete = cell<bool>(configs, configs.column("search_complete"), r);
    rec.oracle_s = cell<double>(configs, configs.column("oracle_s"), r);
    for (std::size_t g : rows_of(group_rows, id)) {
      std::vector<double> f;
      for (std::size_t c = 2; c < groups.columns.size(); ++c) f.push_back(cell<double>(groups, static_cast<int>(c), g));
      rec.group_features.push_back(std::move(f));
    }
    for (std::size_t g : rows_of(global_rows, id))
      for (std::size_t c = 1; c < globals.columns.size(); ++c) rec.global_features.push_back(cell<double>(globals, static_cast<int>(c), g));
    for (std::size_t l : rows_of(label_rows, id))
      rec.labels.push_back({cell<std::string>(labels, labels.column("template"), l),
                            tokens_of(cell<std::string>(labels, labels.column("tokens"), l), token_ids,
                                      path + ": /labels[" + std::to_string(l) + "]: tokens"),
                            cell<double>(labels, labels.column("simulated_s"), l),
                            cell<double>(labels, labels.column("estimated_s"), l)});
    for (std::size_t c : rows_of(cand_rows, id))
      rec.candidates.push_back({cell<std::string>(cands, cands.column("template"), c),
                                cell<double>(cands, cands.column("estimated_s"), c),
                                cell<double>(cands, cands.column("simulated_s"), c), cell<bool>(cands, cands.column("fits"), c)});
    out.push_back(std::move(rec));
  }
  return out;
}

}  // namespace arachne::planner
