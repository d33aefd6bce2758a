// Plan YAML (DESIGN.md "Plan"): GPU selectors, parsing with file:line: field errors, writing,
// the Megatron shorthand, and structural validation with precise reasons.
#include "sim/plan/plan_yaml.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "sim/io/input_error.h"
#include "sim/io/yaml_fields.h"
#include "sim/io/numbers.h"

namespace arachne {
namespace {

// ------------------------------------------------------------------ cluster arithmetic
// On the plain fields only, so this file does not depend on cluster.cpp's out-of-line members.

int cluster_gpu_count(const Cluster& c) {
  int n = 0;
  for (const Node& node : c.nodes) n = std::max(n, node.first_gpu + node.gpus);
  return n;
}

int node_index_of(const Cluster& c, GpuId g) {
  for (size_t i = 0; i < c.nodes.size(); ++i)
    if (g >= c.nodes[i].first_gpu && g < c.nodes[i].first_gpu + c.nodes[i].gpus) return static_cast<int>(i);
  return -1;
}

int node_index_by_id(const Cluster& c, int id) {
  for (size_t i = 0; i < c.nodes.size(); ++i)
    if (c.nodes[i].id == id) return static_cast<int>(i);
  return -1;
}

std::string gpu_name(const Cluster& c, GpuId g) {
  const int n = node_index_of(c, g);
  if (n < 0) return "GPU id " + std::to_string(g);
  return "n" + std::to_string(c.nodes[n].id) + ":" + std::to_string(g - c.nodes[n].first_gpu);
}

std::string node_list_text(const Cluster& c) {
  if (c.nodes.empty()) return "the cluster has no nodes";
  return "the cluster has nodes n" + std::to_string(c.nodes.front().id) + "-n" + std::to_string(c.nodes.back().id);
}

// ------------------------------------------------------------------ small text helpers

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// Non-negative decimal integer, the whole text; nullopt otherwise.
std::optional<int> parse_index(const std::string& s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  for (char ch : s)
    if (ch < '0' || ch > '9') return std::nullopt;
  return std::stoi(s);
}

// "layers 12-15" / "layer 12" (inclusive range).
std::string layer_span(int first, int last) {
  if (first == last) return "layer " + std::to_string(first);
  return "layers " + std::to_string(first) + "-" + std::to_string(last);
}

// Shortest decimal text that reads back as the same double.
std::string number_text(double v) {
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// ------------------------------------------------------------------ GPU selectors

// Node index of a node name "n<k>".
int parse_node_name(const std::string& text, const Cluster& c) {
  if (text.size() < 2 || text[0] != 'n' || !parse_index(text.substr(1)))
    throw std::invalid_argument("malformed node name '" + text + "' (expected n<k>, e.g. n3)");
  const int id = *parse_index(text.substr(1));
  const int idx = node_index_by_id(c, id);
  if (idx < 0) throw std::invalid_argument("unknown node " + text + " (" + node_list_text(c) + ")");
  return idx;
}

// One item of a node's GPU list: "2" or "0-3".
void add_gpu_list_item(int node, const std::string& item, const Cluster& c, std::vector<GpuId>& out) {
  const Node& nd = c.nodes[node];
  const std::string name = "n" + std::to_string(nd.id);
  if (item.empty()) throw std::invalid_argument("missing GPU index after '" + name + ":'");
  int lo = 0, hi = 0;
  const auto dash = item.find('-');
  if (dash == std::string::npos) {
    const auto v = parse_index(item);
    if (!v) throw std::invalid_argument("malformed GPU index '" + item + "' for " + name + " (expected a number or a range a-b)");
    lo = hi = *v;
  } else {
    const auto a = parse_index(trim(item.substr(0, dash)));
    const auto b = parse_index(trim(item.substr(dash + 1)));
    if (!a || !b) throw std::invalid_argument("malformed GPU range '" + item + "' for " + name + " (expected a-b, e.g. 0-3)");
    if (*b < *a) throw std::invalid_argument("GPU range '" + item + "' of " + name + " is reversed");
    lo = *a;
    hi = *b;
  }
  if (hi >= nd.gpus)
    throw std::invalid_argument("GPU index " + std::to_string(hi) + " out of range for " + name + " (it has " +
                                std::to_string(nd.gpus) + " GPUs: 0-" + std::to_string(nd.gpus - 1) + ")");
  for (int l = lo; l <= hi; ++l) out.push_back(nd.first_gpu + l);
}

// ------------------------------------------------------------------ YAML reading

struct Reader {
  const std::string& source;

  [[noreturn]] void fail(const YAML::Node& at, const std::string& field, const std::string& reason) const {
    throw InputError(file_where(source, at.Mark().line, field), reason);
  }
  [[noreturn]] void fail_line(int line, const std::string& field, const std::string& reason) const {
    throw InputError(file_where(source, line, field), reason);
  }

  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  // Unknown and duplicate keys are errors.
  void check_keys(const YAML::Node& map, const std::string& path, std::initializer_list<const char*> allowed) const {
    std::set<std::string> seen;
    for (const auto& kv : map) {
      if (!kv.first.IsScalar()) fail(kv.first, path, "keys must be plain names");
      const std::string key = kv.first.Scalar();
      bool ok = false;
      std::string expected;
      for (const char* a : allowed) {
        ok = ok || key == a;
        expected += (expected.empty() ? "" : ", ") + std::string(a);
      }
      if (!ok) fail(kv.first, join(path, key), "unknown key '" + key + "' (expected one of: " + expected + ")");
      if (!seen.insert(key).second) fail(kv.first, join(path, key), "duplicate key '" + key + "'");
    }
  }

  YAML::Node required(const YAML::Node& map, const std::string& path, const char* key) const {
    const YAML::Node v = map[key];
    if (!v) fail(map, join(path, key), std::string("missing required key '") + key + "'");
    return v;
  }

  int get_int(const YAML::Node& n, const std::string& field, limits::IntRange range) const {
    if (!n.IsScalar()) fail(n, field, "expected an integer");
    return read_int(n.Scalar(), range, file_where(source, n.Mark().line, field));
  }
  double get_double(const YAML::Node& n, const std::string& field, limits::RealRange range) const {
    if (!n.IsScalar()) fail(n, field, "expected a number");
    return read_real(n.Scalar(), range, file_where(source, n.Mark().line, field));
  }
  bool get_bool(const YAML::Node& n, const std::string& field) const {
    if (!n.IsScalar()) fail(n, field, "expected true or false");
    try {
      return n.as<bool>();
    } catch (const YAML::Exception&) {
      fail(n, field, "expected true or false, got '" + n.Scalar() + "'");
    }
  }
  std::string get_string(const YAML::Node& n, const std::string& field) const {
    if (!n.IsScalar()) fail(n, field, "expected a string");
    return n.Scalar();
  }
  YAML::Node get_sequence(const YAML::Node& n, const std::string& field, const char* what) const {
    if (!n.IsSequence()) fail(n, field, std::string("expected a list of ") + what);
    if (n.size() == 0) fail(n, field, std::string("expected at least one of ") + what);
    return n;
  }
};

TpGroup read_group(const Reader& r, const YAML::Node& n, const std::string& path, const Cluster& cluster,
                   bool& share_given) {
  if (!n.IsMap()) r.fail(n, path, "a TP group must be a mapping {gpus, tp, share}");
  r.check_keys(n, path, {"gpus", "tp", "share"});
  TpGroup g;
  g.line = n.Mark().line;
  const YAML::Node gpus = r.required(n, path, "gpus");
  g.selector = r.get_string(gpus, path + ".gpus");
  try {
    g.gpus = parse_gpu_selector(g.selector, cluster);
  } catch (const std::invalid_argument& e) {
    r.fail(gpus, path + ".gpus", e.what());
  }
  g.tp = n["tp"] ? r.get_int(n["tp"], path + ".tp", limits::kDegree) : static_cast<int>(g.gpus.size());
  share_given = static_cast<bool>(n["share"]);
  if (share_given) g.share = r.get_double(n["share"], path + ".share", limits::kFraction);
  return g;
}

Stage read_stage(const Reader& r, const YAML::Node& n, const std::string& path, const Cluster& cluster) {
  if (!n.IsMap()) r.fail(n, path, "a stage must be a mapping {layers, groups, ...}");
  r.check_keys(n, path, {"layers", "groups", "ep", "ep_scope", "experts"});
  Stage s;
  s.line = n.Mark().line;
  const YAML::Node layers = r.required(n, path, "layers");
  if (!layers.IsSequence() || layers.size() != 2)
    r.fail(layers, path + ".layers", "expected a half-open layer range [begin, end]");
  s.layer_begin = r.get_int(layers[0], path + ".layers", {0, limits::kLayers.max});
  s.layer_end = r.get_int(layers[1], path + ".layers", {0, limits::kLayers.max});

  const YAML::Node groups = r.get_sequence(r.required(n, path, "groups"), path + ".groups", "TP groups");
  std::vector<bool> given;
  double given_sum = 0;
  for (size_t k = 0; k < groups.size(); ++k) {
    bool share_given = false;
    s.groups.push_back(read_group(r, groups[k], path + ".groups[" + std::to_string(k) + "]", cluster, share_given));
    given.push_back(share_given);
    if (share_given) given_sum += s.groups.back().share;
  }
  // Omitted shares split what the given ones leave equally (1/groups when none is given).
  const auto omitted = std::count(given.begin(), given.end(), false);
  for (size_t k = 0; k < s.groups.size(); ++k)
    if (!given[k]) s.groups[k].share = (1.0 - given_sum) / static_cast<double>(omitted);

  if (n["ep"]) s.ep = r.get_int(n["ep"], path + ".ep", limits::kDegree);
  if (n["ep_scope"]) {
    try {
      s.ep_scope = parse_ep_scope(r.get_string(n["ep_scope"], path + ".ep_scope"));
    } catch (const std::invalid_argument& e) {
      r.fail(n["ep_scope"], path + ".ep_scope", e.what());
    }
  }
  if (n["experts"]) {
    const YAML::Node ex = r.get_sequence(n["experts"], path + ".experts", "expert counts");
    for (size_t k = 0; k < ex.size(); ++k)
      s.experts.push_back(r.get_int(ex[k], path + ".experts[" + std::to_string(k) + "]", {0, limits::kExperts.max}));
  }
  return s;
}

Pipeline read_pipeline(const Reader& r, const YAML::Node& n, const std::string& path, const Cluster& cluster) {
  if (!n.IsMap()) r.fail(n, path, "a pipeline must be a mapping {micro_batch, micro_batches, stages}");
  r.check_keys(n, path, {"micro_batch", "micro_batches", "stages"});
  Pipeline p;
  p.line = n.Mark().line;
  p.micro_batch = r.get_int(r.required(n, path, "micro_batch"), path + ".micro_batch", limits::kMicroBatch);
  p.micro_batches = r.get_int(r.required(n, path, "micro_batches"), path + ".micro_batches", limits::kGlobalBatch);
  const YAML::Node stages = r.get_sequence(r.required(n, path, "stages"), path + ".stages", "stages");
  for (size_t j = 0; j < stages.size(); ++j)
    p.stages.push_back(read_stage(r, stages[j], path + ".stages[" + std::to_string(j) + "]", cluster));
  return p;
}

Plan read_plan(const Reader& r, const YAML::Node& root, const Cluster& cluster) {
  if (!root.IsDefined() || root.IsNull()) r.fail_line(-1, "", "empty plan (expected a mapping with 'pipelines')");
  if (!root.IsMap()) r.fail(root, "", "a plan must be a YAML mapping with a 'pipelines' list");
  r.check_keys(root, "", {"version", "schedule", "interleave", "recompute", "sequence_parallel", "zero1",
                          "overlap_grad_reduce", "pipelines"});
  Plan plan;
  if (root["version"]) {
    const int v = r.get_int(root["version"], "version", limits::kFormatVersion);
    if (v != 1) r.fail(root["version"], "version", "unsupported plan version " + std::to_string(v) + " (this program reads version 1)");
  }
  if (const YAML::Node n = root["schedule"]) {
    plan.schedule_line = n.Mark().line;
    try {
      plan.schedule = parse_schedule(r.get_string(n, "schedule"));
    } catch (const std::invalid_argument& e) {
      r.fail(n, "schedule", e.what());
    }
  }
  if (const YAML::Node n = root["interleave"]) {
    plan.interleave_line = n.Mark().line;
    plan.interleave = r.get_int(n, "interleave", limits::kDegree);
  }
  if (const YAML::Node n = root["recompute"]) {
    try {
      plan.recompute = parse_recompute(r.get_string(n, "recompute"));
    } catch (const std::invalid_argument& e) {
      r.fail(n, "recompute", e.what());
    }
  }
  if (root["sequence_parallel"]) plan.sequence_parallel = r.get_bool(root["sequence_parallel"], "sequence_parallel");
  if (root["zero1"]) plan.zero1 = r.get_bool(root["zero1"], "zero1");
  if (root["overlap_grad_reduce"]) plan.overlap_grad_reduce = r.get_bool(root["overlap_grad_reduce"], "overlap_grad_reduce");

  const YAML::Node pipelines = r.get_sequence(r.required(root, "", "pipelines"), "pipelines", "pipelines");
  plan.pipelines_line = pipelines.Mark().line;
  for (size_t i = 0; i < pipelines.size(); ++i)
    plan.pipelines.push_back(read_pipeline(r, pipelines[i], "pipelines[" + std::to_string(i) + "]", cluster));
  return plan;
}

// ------------------------------------------------------------------ validation

std::string stage_path(int i, int j) { return "pipelines[" + std::to_string(i) + "].stages[" + std::to_string(j) + "]"; }

bool same_groups(const Stage& a, const Stage& b) {
  if (a.groups.size() != b.groups.size()) return false;
  for (size_t k = 0; k < a.groups.size(); ++k)
    if (a.groups[k].gpus != b.groups[k].gpus || a.groups[k].tp != b.groups[k].tp || a.groups[k].share != b.groups[k].share)
      return false;
  return true;
}

std::string range_text(const Stage& s) {
  return "[" + std::to_string(s.layer_begin) + ", " + std::to_string(s.layer_end) + ")";
}

}  // namespace

// ------------------------------------------------------------------ public API

std::vector<GpuId> parse_gpu_selector(const std::string& sel, const Cluster& cluster) {
  if (trim(sel).empty()) throw std::invalid_argument("empty GPU selector");
  std::vector<std::string> items;
  std::stringstream ss(sel);
  for (std::string item; std::getline(ss, item, ',');) items.push_back(trim(item));
  if (sel.back() == ',') items.emplace_back();

  std::vector<GpuId> out;
  int list_node = -1;  // node whose GPU list ("nK:...") the previous item opened
  for (const std::string& item : items) {
    if (item.empty()) throw std::invalid_argument("empty item in GPU selector '" + sel + "'");
    if (item[0] == 'n') {
      const auto colon = item.find(':');
      if (colon != std::string::npos) {
        list_node = parse_node_name(trim(item.substr(0, colon)), cluster);
        add_gpu_list_item(list_node, trim(item.substr(colon + 1)), cluster, out);
        continue;
      }
      list_node = -1;
      const auto dash = item.find('-');
      if (dash == std::string::npos) {
        const Node& nd = cluster.nodes[parse_node_name(item, cluster)];
        for (int l = 0; l < nd.gpus; ++l) out.push_back(nd.first_gpu + l);
        continue;
      }
      const int a = parse_node_name(trim(item.substr(0, dash)), cluster);
      const int b = parse_node_name(trim(item.substr(dash + 1)), cluster);
      const int id_a = cluster.nodes[a].id, id_b = cluster.nodes[b].id;
      if (id_b < id_a) throw std::invalid_argument("node range '" + item + "' is reversed");
      for (int id = id_a; id <= id_b; ++id) {
        const int idx = node_index_by_id(cluster, id);
        if (idx < 0) throw std::invalid_argument("unknown node n" + std::to_string(id) + " in range '" + item + "' (" + node_list_text(cluster) + ")");
        for (int l = 0; l < cluster.nodes[idx].gpus; ++l) out.push_back(cluster.nodes[idx].first_gpu + l);
      }
    } else if (item[0] >= '0' && item[0] <= '9') {
      if (list_node < 0)
        throw std::invalid_argument("'" + item + "' in GPU selector '" + sel +
                                    "' is not a node; a bare GPU index must follow a node's list such as 'n3:0'");
      add_gpu_list_item(list_node, item, cluster, out);
    } else {
      throw std::invalid_argument("malformed item '" + item + "' in GPU selector '" + sel +
                                  "' (expected n3, n3:0-3, n3:0,2 or n4-n7)");
    }
  }
  std::set<GpuId> seen;
  for (const GpuId g : out)
    if (!seen.insert(g).second)
      throw std::invalid_argument("GPU " + gpu_name(cluster, g) + " is listed twice in GPU selector '" + sel + "'");
  return out;
}

std::string format_gpu_selector(const std::vector<GpuId>& gpus, const Cluster& cluster) {
  std::string out;
  auto emit = [&out](const std::string& item) { out += (out.empty() ? "" : ",") + item; };
  int open_list_node = -1;  // node whose "nK:" list the last item continues
  size_t i = 0;
  while (i < gpus.size()) {
    const int node = node_index_of(cluster, gpus[i]);
    if (node < 0) throw std::invalid_argument("GPU id " + std::to_string(gpus[i]) + " is not in the cluster");
    const Node& nd = cluster.nodes[node];
    size_t j = i + 1;  // run [i, j) of consecutive GPUs in this node
    while (j < gpus.size() && gpus[j] == gpus[j - 1] + 1 && gpus[j] < nd.first_gpu + nd.gpus) ++j;
    const int lo = gpus[i] - nd.first_gpu, hi = gpus[j - 1] - nd.first_gpu;
    if (lo == 0 && hi == nd.gpus - 1) {
      // Whole node; merge following whole nodes with consecutive ids.
      int last = node;
      size_t k = j;
      while (last + 1 < static_cast<int>(cluster.nodes.size()) && cluster.nodes[last + 1].id == cluster.nodes[last].id + 1) {
        const Node& next = cluster.nodes[last + 1];
        if (k + next.gpus > gpus.size()) break;
        bool whole = true;
        for (int l = 0; l < next.gpus && whole; ++l) whole = gpus[k + l] == next.first_gpu + l;
        if (!whole || next.gpus == 0) break;
        k += next.gpus;
        ++last;
      }
      const std::string name = "n" + std::to_string(nd.id);
      emit(last == node ? name : name + "-n" + std::to_string(cluster.nodes[last].id));
      open_list_node = -1;
      i = k;
      continue;
    }
    const std::string run = lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
    emit(open_list_node == node ? run : "n" + std::to_string(nd.id) + ":" + run);
    open_list_node = node;
    i = j;
  }
  return out;
}

Plan parse_plan_yaml_text(const std::string& text, const std::string& source_name, const Cluster& cluster) {
  const Reader r{source_name};
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    yaml_fields::syntax_error(e, source_name);
  }
  try {
    return read_plan(r, root, cluster);
  } catch (const YAML::Exception& e) {
    throw InputError(file_where(source_name, e.mark.line, ""), e.msg);
  }
}

Plan parse_plan_yaml(const std::string& path, const Cluster& cluster) {
  std::ifstream in(path);
  if (!in) throw InputError(path, "cannot open plan file");
  std::stringstream buf;
  buf << in.rdbuf();
  return parse_plan_yaml_text(buf.str(), path, cluster);
}

std::string plan_to_yaml(const Plan& plan, const Cluster& cluster) {
  std::ostringstream y;
  y << "version: 1\n";
  y << "schedule: " << to_string(plan.schedule) << "\n";
  y << "interleave: " << plan.interleave << "\n";
  y << "recompute: " << to_string(plan.recompute) << "\n";
  y << "sequence_parallel: " << (plan.sequence_parallel ? "true" : "false") << "\n";
  y << "zero1: " << (plan.zero1 ? "true" : "false") << "\n";
  y << "overlap_grad_reduce: " << (plan.overlap_grad_reduce ? "true" : "false") << "\n";
  y << "pipelines:\n";
  for (const Pipeline& p : plan.pipelines) {
    y << "  - micro_batch: " << p.micro_batch << "\n";
    y << "    micro_batches: " << p.micro_batches << "\n";
    y << "    stages:\n";
    for (const Stage& s : p.stages) {
      y << "      - layers: [" << s.layer_begin << ", " << s.layer_end << "]\n";
      y << "        groups:\n";
      for (const TpGroup& g : s.groups) {
        // Keep the selector as written when it still denotes these GPUs in this order.
        std::string sel;
        try {
          if (!g.selector.empty() && parse_gpu_selector(g.selector, cluster) == g.gpus) sel = g.selector;
        } catch (const std::invalid_argument&) {
        }
        if (sel.empty()) sel = format_gpu_selector(g.gpus, cluster);
        y << "          - {gpus: \"" << sel << "\", tp: " << g.tp << ", share: " << number_text(g.share) << "}\n";
      }
      if (s.ep != 1 || s.ep_scope != EpScope::Pipelines || !s.experts.empty()) {
        y << "        ep: " << s.ep << "\n";
        y << "        ep_scope: " << to_string(s.ep_scope) << "\n";
      }
      if (!s.experts.empty()) {
        y << "        experts: [";
        for (size_t k = 0; k < s.experts.size(); ++k) y << (k ? ", " : "") << s.experts[k];
        y << "]\n";
      }
    }
  }
  return y.str();
}

Plan plan_from_shorthand(const Shorthand& s, const Cluster& cluster, const ModelConfig& model) {
  auto positive = [](int v, const char* flag) {
    if (v < 1) throw InputError(flag, std::string(flag) + " must be at least 1, got " + std::to_string(v));
  };
  positive(s.tp, "--tp");
  positive(s.pp, "--pp");
  positive(s.dp, "--dp");
  positive(s.ep, "--ep");
  positive(s.micro_batch, "--micro-batch");
  positive(s.interleave, "--interleave");

  Plan plan;
  plan.recompute = s.recompute;
  plan.sequence_parallel = s.sequence_parallel;
  plan.zero1 = s.zero1;
  plan.schedule = s.schedule;
  plan.interleave = s.interleave;
  // --interleave V > 1 selects Megatron's interleaved schedule (virtual pipeline stages).
  if (s.interleave > 1 && s.schedule == Schedule::OneFOneB) plan.schedule = Schedule::Interleaved;
  if (plan.schedule == Schedule::Interleaved && s.interleave < 2)
    throw InputError("--interleave", "schedule interleaved needs --interleave of at least 2, got " + std::to_string(s.interleave));
  if (plan.schedule == Schedule::GPipe && s.interleave > 1)
    throw InputError("--interleave", "--interleave " + std::to_string(s.interleave) + " needs schedule interleaved, not gpipe");
  if (plan.schedule == Schedule::Interleaved && s.pp < 2)
    throw InputError("--pp", "the interleaved schedule needs --pp of at least 2, got " + std::to_string(s.pp));

  const long needed = static_cast<long>(s.tp) * s.pp * s.dp;
  const int have = cluster_gpu_count(cluster);
  if (needed > have)
    throw InputError("--tp/--pp/--dp", "plan needs " + std::to_string(needed) + " GPUs (tp " + std::to_string(s.tp) + " x pp " +
                                           std::to_string(s.pp) + " x dp " + std::to_string(s.dp) + "), cluster has " +
                                           std::to_string(have));
  if (model.heads > 0 && model.heads % s.tp != 0)
    throw InputError("--tp", "tp=" + std::to_string(s.tp) + " does not divide " + std::to_string(model.heads) + " attention heads");
  if (model.kv_heads > 0 && model.kv_heads % s.tp != 0)
    throw InputError("--tp", "tp=" + std::to_string(s.tp) + " does not divide " + std::to_string(model.kv_heads) + " key/value heads");

  const int chunks = s.pp * plan.interleave;  // stages per pipeline (virtual stages when interleaved)
  if (model.layers % chunks != 0) {
    if (plan.schedule == Schedule::Interleaved)
      throw InputError("--pp", std::to_string(model.layers) + " layers do not divide into pp=" + std::to_string(s.pp) +
                                   " x interleave=" + std::to_string(plan.interleave) + " = " + std::to_string(chunks) + " model chunks");
    throw InputError("--pp", std::to_string(model.layers) + " layers do not divide into pp=" + std::to_string(s.pp) + " stages");
  }

  if (!model.moe && s.ep != 1)
    throw InputError("--ep", "--ep " + std::to_string(s.ep) + " needs an MoE model; " + model.name + " has no experts");
  if (s.dp % s.ep != 0)
    throw InputError("--ep", "ep=" + std::to_string(s.ep) + " does not divide dp=" + std::to_string(s.dp) +
                                 " (expert parallelism is taken from the data-parallel ranks)");
  if (model.moe && model.moe->experts % s.ep != 0)
    throw InputError("--ep", "ep=" + std::to_string(s.ep) + " does not divide " + std::to_string(model.moe->experts) + " experts");

  const long global = s.global_batch ? *s.global_batch : model.global_batch;
  if (global < 1)
    throw InputError("--global-batch", "no global batch: give --global-batch or set global_batch in " +
                                           (model.source.empty() ? std::string("the model") : model.source));
  const long per_micro_step = static_cast<long>(s.dp) * s.micro_batch;
  if (global % per_micro_step != 0)
    throw InputError("--global-batch", "global batch " + std::to_string(global) + " does not divide into dp=" +
                                           std::to_string(s.dp) + " x micro-batch " + std::to_string(s.micro_batch) +
                                           " = " + std::to_string(per_micro_step) + " samples per micro-batch step");

  const int per_chunk = model.layers / chunks;
  for (int d = 0; d < s.dp; ++d) {
    Pipeline p;
    p.micro_batch = s.micro_batch;
    p.micro_batches = static_cast<int>(global / per_micro_step);
    for (int j = 0; j < chunks; ++j) {
      const int pp_rank = j % s.pp;  // virtual stage j runs on physical stage j % pp
      Stage st;
      st.layer_begin = j * per_chunk;
      st.layer_end = (j + 1) * per_chunk;
      st.ep = s.ep;
      TpGroup g;
      g.tp = s.tp;
      g.share = 1.0;
      // Megatron rank order (TP fastest, then DP, then PP): r = pp_rank*(dp*tp) + dp_rank*tp + tp_rank,
      // and GPU ids follow the nodes in listing order, so rank r is GPU r.
      for (int t = 0; t < s.tp; ++t) g.gpus.push_back(pp_rank * (s.dp * s.tp) + d * s.tp + t);
      g.selector = format_gpu_selector(g.gpus, cluster);
      st.groups.push_back(std::move(g));
      p.stages.push_back(std::move(st));
    }
    plan.pipelines.push_back(std::move(p));
  }
  validate_plan(plan, cluster, model, global, "--tp/--pp/--dp");
  return plan;
}

namespace {
// Whether the pipeline's stages are non-empty and follow each other from layer 0 to layer `layers`.
bool stages_tile_layers(const Pipeline& p, int layers) {
  if (p.stages.empty() || p.stages.front().layer_begin != 0 || p.stages.back().layer_end != layers) return false;
  for (size_t j = 0; j < p.stages.size(); ++j)
    if (p.stages[j].layer_end <= p.stages[j].layer_begin || (j > 0 && p.stages[j].layer_begin != p.stages[j - 1].layer_end))
      return false;
  return true;
}
}  // namespace

void validate_plan(const Plan& plan, const Cluster& cluster, const ModelConfig& model,
                   std::optional<long> global_batch, const std::string& source) {
  auto fail = [&source](int line, const std::string& field, const std::string& reason) {
    throw InputError(file_where(source, line, field), reason);
  };
  const int schedule_where = plan.interleave_line >= 0 ? plan.interleave_line : plan.schedule_line;

  // Schedule and interleave.
  const bool interleaved = plan.schedule == Schedule::Interleaved;
  if (interleaved && plan.interleave < 2)
    fail(schedule_where, "interleave", "schedule interleaved needs interleave of at least 2, got " + std::to_string(plan.interleave));
  if (!interleaved && plan.interleave != 1)
    fail(schedule_where, "interleave", "interleave " + std::to_string(plan.interleave) + " needs schedule interleaved (schedule is " +
                                           to_string(plan.schedule) + ")");
  if (plan.pipelines.empty()) fail(plan.pipelines_line, "pipelines", "plan has no pipelines");

  const int total_gpus = cluster_gpu_count(cluster);
  struct GroupAt {
    int pipeline = -1, stage = -1, group = -1;
  };
  std::vector<GroupAt> used_by(std::max(total_gpus, 0));  // per GPU: the group that uses it (pipeline -1: none)
  std::vector<char> on_a_node(std::max(total_gpus, 0), 0);  // per GPU id: some node has it
  for (const Node& node : cluster.nodes)
    for (GpuId g = std::max(node.first_gpu, 0); g < std::min(node.first_gpu + node.gpus, total_gpus); ++g) on_a_node[g] = 1;
  auto group_path = [](const GroupAt& at) { return stage_path(at.pipeline, at.stage) + ".groups[" + std::to_string(at.group) + "]"; };

  for (int i = 0; i < static_cast<int>(plan.pipelines.size()); ++i) {
    const Pipeline& p = plan.pipelines[i];
    auto ppath = [i] { return "pipelines[" + std::to_string(i) + "]"; };  // paths only for messages
    if (p.micro_batch < 1) fail(p.line, ppath() + ".micro_batch", "micro_batch must be at least 1, got " + std::to_string(p.micro_batch));
    if (p.micro_batches < 1)
      fail(p.line, ppath() + ".micro_batches", "micro_batches must be at least 1, got " + std::to_string(p.micro_batches));
    const int n = static_cast<int>(p.stages.size());
    if (n == 0) fail(p.line, ppath() + ".stages", "pipeline has no stages");
    if (static_cast<long long>(p.micro_batches) * n > limits::kMaxPipelineSteps)
      fail(p.line, ppath() + ".micro_batches",
           std::to_string(p.micro_batches) + " micro-batches x " + std::to_string(n) + " stages exceed the supported " +
               std::to_string(limits::kMaxPipelineSteps) + " steps per pipeline (use larger micro-batches)");
    int pp = n;
    if (interleaved) {
      if (n % plan.interleave != 0)
        fail(p.line, ppath() + ".stages", "interleaved pipeline has " + std::to_string(n) + " stages, not a multiple of interleave=" +
                                            std::to_string(plan.interleave));
      pp = n / plan.interleave;
      if (pp < 2)
        fail(p.line, ppath() + ".stages", "the interleaved schedule needs at least 2 physical stages; " + std::to_string(n) +
                                            " stages / interleave " + std::to_string(plan.interleave) + " = " + std::to_string(pp));
      // Megatron-LM's interleaved schedule takes micro-batches in groups of pp (schedules.py asserts it).
      if (p.micro_batches % pp != 0)
        fail(p.line, ppath() + ".micro_batches", "the interleaved schedule needs micro_batches divisible by pp=" +
                                                   std::to_string(pp) + ", got " + std::to_string(p.micro_batches));
    }

    // Stages: groups, GPUs, TP.
    for (int j = 0; j < n; ++j) {
      const Stage& s = p.stages[j];
      auto spath = [i, j] { return stage_path(i, j); };
      if (s.groups.empty()) fail(s.line, spath() + ".groups", "stage has no TP groups");
      if (interleaved && j >= pp && !same_groups(s, p.stages[j % pp]))
        fail(s.line, spath() + ".groups", "in an interleaved pipeline stage " + std::to_string(j) + " must run on the TP groups of stage " +
                                            std::to_string(j % pp) + " (stage j runs on stage j % pp, pp = " + std::to_string(pp) + ")");
      double share_sum = 0;
      for (int k = 0; k < static_cast<int>(s.groups.size()); ++k) {
        const TpGroup& g = s.groups[k];
        const GroupAt here{i, j, k};
        auto gpath = [&] { return group_path(here); };
        if (g.tp < 1) fail(g.line, gpath() + ".tp", "tp must be at least 1, got " + std::to_string(g.tp));
        if (static_cast<int>(g.gpus.size()) != g.tp)
          fail(g.line, gpath() + ".tp", "group has " + std::to_string(g.gpus.size()) + " GPUs but tp=" + std::to_string(g.tp) +
                                          " (a TP group's GPU count must equal tp)");
        if (model.heads > 0 && model.heads % g.tp != 0)
          fail(g.line, gpath() + ".tp", "tp=" + std::to_string(g.tp) + " does not divide " + std::to_string(model.heads) + " attention heads");
        if (model.kv_heads > 0 && model.kv_heads % g.tp != 0)
          fail(g.line, gpath() + ".tp", "tp=" + std::to_string(g.tp) + " does not divide " + std::to_string(model.kv_heads) + " key/value heads");
        if (!(g.share > 0) || !std::isfinite(g.share))
          fail(g.line, gpath() + ".share", "share must be greater than 0, got " + number_text(g.share));
        share_sum += g.share;
        for (const GpuId gpu : g.gpus) {
          if (gpu < 0 || gpu >= total_gpus || !on_a_node[gpu])
            fail(g.line, gpath() + ".gpus", "GPU id " + std::to_string(gpu) + " is not in the cluster (it has " + std::to_string(total_gpus) + " GPUs)");
          if (interleaved && j >= pp) continue;  // the pattern check above showed these are stage j % pp's GPUs
          if (used_by[gpu].pipeline >= 0)
            fail(g.line, gpath() + ".gpus", "GPU " + gpu_name(cluster, gpu) + " is used twice: by " + group_path(used_by[gpu]) + " and by " + gpath());
          used_by[gpu] = here;
        }
      }
      if (std::abs(share_sum - 1.0) > 1e-9)
        fail(s.line, spath() + ".groups", "TP group shares sum to " + number_text(share_sum) + ", not 1");
    }

    // Layers: each stage non-empty and inside the model; every layer covered exactly once; in order. Stages
    // that follow each other from the first layer to the last pass all of it; the checks run (for their
    // messages) only where they do not.
    const int L = model.layers;
    if (!stages_tile_layers(p, L)) {
      std::vector<int> covered(std::max(L, 0), 0);
      for (int j = 0; j < n; ++j) {
        const Stage& s = p.stages[j];
        auto lpath = [i, j] { return stage_path(i, j) + ".layers"; };
        if (s.layer_end <= s.layer_begin) fail(s.line, lpath(), "stage layers " + range_text(s) + " are empty");
        if (s.layer_begin < 0 || s.layer_end > L)
          fail(s.line, lpath(), "stage layers " + range_text(s) + " exceed the model's " + std::to_string(L) + " layers [0, " + std::to_string(L) + ")");
        for (int l = s.layer_begin; l < s.layer_end; ++l)
          if (covered[l]++ > 0) fail(s.line, lpath(), "layer " + std::to_string(l) + " covered twice");
      }
      for (int l = 0; l < L; ++l) {
        if (covered[l] != 0) continue;
        int last = l;
        while (last + 1 < L && covered[last + 1] == 0) ++last;
        // Point at the first stage after the gap, else at the pipeline.
        int line = p.line;
        std::string field = ppath() + ".stages";
        for (int j = 0; j < n; ++j)
          if (p.stages[j].layer_begin > last) {
            line = p.stages[j].line;
            field = stage_path(i, j) + ".layers";
            break;
          }
        fail(line, field, layer_span(l, last) + " not covered");
      }
      for (int j = 1; j < n; ++j)
        if (p.stages[j].layer_begin != p.stages[j - 1].layer_end)
          fail(p.stages[j].line, stage_path(i, j) + ".layers",
               "stage layers " + range_text(p.stages[j]) + " do not follow the previous stage's " + range_text(p.stages[j - 1]) +
                   " (stages must be listed in layer order)");
    }

    // Expert parallelism inside the stage.
    for (int j = 0; j < n; ++j) {
      const Stage& s = p.stages[j];
      auto spath = [i, j] { return stage_path(i, j); };
      if (s.ep < 1) fail(s.line, spath() + ".ep", "ep must be at least 1, got " + std::to_string(s.ep));
      if (!model.moe) {
        if (s.ep != 1)
          fail(s.line, spath() + ".ep", "ep=" + std::to_string(s.ep) + " on a dense model: " +
                                          (model.name.empty() ? std::string("the model") : model.name) + " has no experts, so ep must be 1");
        if (!s.experts.empty())
          fail(s.line, spath() + ".experts", "experts placement given but " +
                                               (model.name.empty() ? std::string("the model") : model.name) + " has no experts");
        continue;
      }
      const int experts = model.moe->experts;
      if (s.experts.empty()) {
        if (experts % s.ep != 0)
          fail(s.line, spath() + ".ep", "ep=" + std::to_string(s.ep) + " does not divide " + std::to_string(experts) +
                                          " experts (give an uneven placement under 'experts')");
      } else {
        if (static_cast<int>(s.experts.size()) != s.ep)
          fail(s.line, spath() + ".experts", "experts lists " + std::to_string(s.experts.size()) + " EP ranks but ep=" + std::to_string(s.ep));
        long sum = 0;
        for (const int e : s.experts) {
          if (e < 1) fail(s.line, spath() + ".experts", "every EP rank must hold at least 1 expert, got " + std::to_string(e));
          sum += e;
        }
        if (sum != experts)
          fail(s.line, spath() + ".experts", "experts sum to " + std::to_string(sum) + " but the model has " + std::to_string(experts));
      }
      if (s.ep_scope == EpScope::Stage) {
        int stage_gpus = 0;
        for (const TpGroup& g : s.groups) stage_gpus += static_cast<int>(g.gpus.size());
        if (stage_gpus % s.ep != 0)
          fail(s.line, spath() + ".ep", "ep=" + std::to_string(s.ep) + " does not divide the stage's " + std::to_string(stage_gpus) +
                                          " GPUs (ep_scope stage)");
      }
    }
  }

  // Expert parallelism across pipelines (Megatron-Core): the EP group of stage j in pipeline i is stage j
  // of the `ep` consecutive pipelines [i/ep*ep, i/ep*ep + ep); they must hold the same layers.
  const int np = static_cast<int>(plan.pipelines.size());
  for (int i = 0; i < np; ++i) {
    const Pipeline& p = plan.pipelines[i];
    for (int j = 0; j < static_cast<int>(p.stages.size()); ++j) {
      const Stage& s = p.stages[j];
      if (s.ep <= 1 || s.ep_scope != EpScope::Pipelines) continue;
      const int first = i / s.ep * s.ep, last = first + s.ep - 1;
      auto block = [first, last] { return "pipelines " + std::to_string(first) + "-" + std::to_string(last); };  // for messages only
      if (last >= np)
        fail(s.line, stage_path(i, j) + ".ep", "ep=" + std::to_string(s.ep) + " with ep_scope pipelines needs " + block() +
                                                   ", the plan has " + std::to_string(np) + " pipelines");
      for (int q = first; q <= last; ++q) {
        if (q == i) continue;
        const Pipeline& other = plan.pipelines[q];
        if (j >= static_cast<int>(other.stages.size()))
          fail(other.line, "pipelines[" + std::to_string(q) + "].stages",
               "pipelines[" + std::to_string(q) + "] has no stage " + std::to_string(j) + ", but it is in the EP group (" + block() +
                   ") of " + stage_path(i, j));
        const Stage& o = other.stages[j];
        auto opath = [q, j] { return stage_path(q, j); };
        if (o.layer_begin != s.layer_begin || o.layer_end != s.layer_end)
          fail(o.line, opath() + ".layers", "EP group " + block() + " needs equal layer ranges: " + opath() + " has " + range_text(o) + ", " +
                                              stage_path(i, j) + " has " + range_text(s));
        if (o.ep != s.ep || o.ep_scope != s.ep_scope)
          fail(o.line, opath() + ".ep", "EP group " + block() + " needs the same ep and ep_scope: " + opath() + " has ep=" + std::to_string(o.ep) +
                                          " (" + to_string(o.ep_scope) + "), " + stage_path(i, j) + " has ep=" + std::to_string(s.ep) + " (" +
                                          to_string(s.ep_scope) + ")");
        if (o.experts != s.experts)
          fail(o.line, opath() + ".experts", "EP group " + block() + " needs the same experts placement as " + stage_path(i, j));
        // The EP peers meet at every MoE layer of every micro-batch, in schedule order: the pipelines of
        // the block must run the same schedule (same depth and micro-batch count) and pair their TP groups
        // one to one, as Megatron-Core's identical data-parallel replicas do; otherwise the rendezvous can
        // wait on a pass that the peer's schedule runs later (a deadlock).
        if (other.stages.size() != p.stages.size() || other.micro_batches != p.micro_batches)
          fail(other.line, "pipelines[" + std::to_string(q) + "]",
               "EP group " + block() + " needs pipelines of the same depth and micro-batch count: pipelines[" + std::to_string(q) +
                   "] has " + std::to_string(other.stages.size()) + " stages and " + std::to_string(other.micro_batches) +
                   " micro-batches, pipelines[" + std::to_string(i) + "] " + std::to_string(p.stages.size()) + " and " +
                   std::to_string(p.micro_batches));
        if (o.groups.size() != s.groups.size())
          fail(o.line, opath() + ".groups", "EP group " + block() + " pairs TP groups one to one: " + opath() + " has " +
                                              std::to_string(o.groups.size()) + " groups, " + stage_path(i, j) + " has " +
                                              std::to_string(s.groups.size()));
      }
    }
  }

  if (global_batch && plan.global_batch() != *global_batch)
    fail(plan.pipelines_line, "pipelines", "plan processes " + std::to_string(plan.global_batch()) + " samples per iteration, --global-batch is " +
                                               std::to_string(*global_batch));
}

}  // namespace arachne
