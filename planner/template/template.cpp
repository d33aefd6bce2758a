// Structural templates: canonical form, the template of a plan, the text and YAML forms, and the check
// that a template can run on a cluster (planner/template/template.h).
#include "planner/template/template.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <functional>
#include <numeric>
#include <stdexcept>

#include "sim/io/input_error.h"
#include "sim/io/yaml_fields.h"

namespace arachne::planner {

// ------------------------------------------------------------------ arithmetic

int StageTemplate::tp_groups() const {
  int n = 0;
  for (const GroupKind& k : kinds) n += k.groups;
  return n;
}

int StageTemplate::gpus() const { return tp * tp_groups(); }

int PipelineTemplate::gpus_per_replica() const {
  int n = 0;
  for (const StageTemplate& s : stages) n += s.gpus();
  return n;
}

int PipelineTemplate::groups_common_factor() const {
  int g = 0;
  for (const StageTemplate& s : stages)
    for (const GroupKind& k : s.kinds) g = std::gcd(g, k.groups);
  return g;
}

int Template::pipeline_count() const {
  int n = 0;
  for (const PipelineTemplate& p : pipelines) n += p.replicas;
  return n;
}

int Template::num_gpus() const {
  int n = 0;
  for (const PipelineTemplate& p : pipelines) n += p.replicas * p.gpus_per_replica();
  return n;
}

std::map<std::string, int> Template::gpus_by_type() const {
  std::map<std::string, int> out;
  for (const PipelineTemplate& p : pipelines)
    for (const StageTemplate& s : p.stages)
      for (const GroupKind& k : s.kinds) out[k.gpu_type] += p.replicas * s.tp * k.groups;
  return out;
}

// ------------------------------------------------------------------ canonical form
namespace {

// One entry per GPU type (groups summed), sorted by type.
void merge_kinds(StageTemplate& s) {
  std::map<std::string, int> by_type;
  for (const GroupKind& k : s.kinds) by_type[k.gpu_type] += k.groups;
  s.kinds.clear();
  for (const auto& [type, groups] : by_type) s.kinds.push_back({type, groups});
}

// EP 1 has no scope and no placement: one spelling for it.
void normalise_ep(StageTemplate& s) {
  if (s.ep != 1) return;
  s.ep_scope = EpScope::Pipelines;
  s.uneven_experts = false;
}

// Pipelines with equal stages become one class with the replicas summed; classes sorted.
void merge_pipelines(std::vector<PipelineTemplate>& ps) {
  std::sort(ps.begin(), ps.end(), [](const PipelineTemplate& a, const PipelineTemplate& b) { return a.stages < b.stages; });
  std::vector<PipelineTemplate> merged;
  for (PipelineTemplate& p : ps) {
    if (!merged.empty() && merged.back().stages == p.stages)
      merged.back().replicas += p.replicas;
    else
      merged.push_back(std::move(p));
  }
  std::sort(merged.begin(), merged.end());
  ps = std::move(merged);
}

}  // namespace

std::size_t TemplateHash::operator()(const Template& t) const {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  const auto mix = [&h](std::uint64_t x) {
    h = (h ^ x) * 0x100000001b3ULL;
    h ^= h >> 29;
  };
  mix(t.pipelines.size());
  for (const PipelineTemplate& p : t.pipelines) {
    mix(static_cast<std::uint64_t>(p.replicas));
    mix(p.stages.size());
    for (const StageTemplate& s : p.stages) {
      mix(static_cast<std::uint64_t>(s.tp));
      mix(static_cast<std::uint64_t>(s.ep));
      mix(static_cast<std::uint64_t>(s.ep_scope));
      mix(s.uneven_experts ? 1 : 0);
      mix(s.kinds.size());
      for (const GroupKind& k : s.kinds) {
        mix(std::hash<std::string>()(k.gpu_type));
        mix(static_cast<std::uint64_t>(k.groups));
      }
    }
  }
  return static_cast<std::size_t>(h);
}

Template canonical(Template t) {
  for (PipelineTemplate& p : t.pipelines)
    for (StageTemplate& s : p.stages) {
      merge_kinds(s);
      normalise_ep(s);
    }
  merge_pipelines(t.pipelines);
  return t;
}

// ------------------------------------------------------------------ the template of a plan
namespace {

std::string gpu_type_of(const Cluster& cluster, GpuId g) { return cluster.group_of_node(cluster.node_of(g)).gpu; }

// The GPU type of a TP group; throws when its GPUs are of several types.
std::string group_type(const TpGroup& g, const Cluster& cluster) {
  if (g.gpus.empty()) throw std::invalid_argument("a TP group has no GPUs");
  const std::string type = gpu_type_of(cluster, g.gpus.front());
  for (const GpuId gpu : g.gpus)
    if (gpu_type_of(cluster, gpu) != type)
      throw std::invalid_argument("a TP group mixes GPU types " + type + " and " + gpu_type_of(cluster, gpu) +
                                  " (outside the template space)");
  return type;
}

bool uneven_placement(const std::vector<int>& experts) {
  return !experts.empty() && std::adjacent_find(experts.begin(), experts.end(), std::not_equal_to<>()) != experts.end();
}

StageTemplate stage_template_of(const Stage& st, const Cluster& cluster) {
  if (st.groups.empty()) throw std::invalid_argument("a stage has no TP groups");
  StageTemplate s;
  s.tp = st.groups.front().tp;
  for (const TpGroup& g : st.groups) {
    if (g.tp != s.tp)
      throw std::invalid_argument("a stage mixes TP widths " + std::to_string(s.tp) + " and " + std::to_string(g.tp) +
                                  " (outside the template space)");
    s.kinds.push_back({group_type(g, cluster), 1});
  }
  s.ep = st.ep;
  s.ep_scope = st.ep_scope;
  s.uneven_experts = uneven_placement(st.experts);
  return s;
}

}  // namespace

// An interleaved plan's template is its physical stages (the GPUs); interleaving is the schedule's business.
Template template_of(const Plan& plan, const Cluster& cluster) {
  Template t;
  for (int i = 0; i < static_cast<int>(plan.pipelines.size()); ++i) {
    PipelineTemplate p;
    const Pipeline& pl = plan.pipelines[i];
    const int physical = std::min(plan.physical_stages(i), static_cast<int>(pl.stages.size()));
    for (int j = 0; j < physical; ++j) p.stages.push_back(stage_template_of(pl.stages[j], cluster));
    t.pipelines.push_back(std::move(p));
  }
  return canonical(std::move(t));
}

// ------------------------------------------------------------------ text form
namespace {

std::string stage_text(const StageTemplate& s) {
  std::string out;
  for (size_t k = 0; k < s.kinds.size(); ++k) {
    if (k > 0) out += "+";
    out += s.kinds[k].gpu_type + ":tp" + std::to_string(s.tp) + "x" + std::to_string(s.kinds[k].groups);
  }
  if (s.ep != 1 || s.ep_scope != EpScope::Pipelines || s.uneven_experts)
    out += " ep" + std::to_string(s.ep) + "/" + to_string(s.ep_scope);
  if (s.uneven_experts) out += " uneven";
  return out;
}

std::string pipeline_text(const PipelineTemplate& p) {
  std::string out = std::to_string(p.replicas) + "x[";
  for (size_t j = 0; j < p.stages.size(); ++j) {
    if (j > 0) out += " | ";
    out += stage_text(p.stages[j]);
  }
  return out + "]";
}

// Characters that end a GPU type name in the text form.
bool type_char(char c) { return !std::isspace(static_cast<unsigned char>(c)) && std::string(":+|;[]").find(c) == std::string::npos; }

// A recursive-descent reader of the text form; errors name the character position (1-based).
class TextReader {
 public:
  TextReader(const std::string& text, const std::string& where) : s_(text), where_(where) {}

  Template read() {
    skip_space();
    if (at_end()) fail("empty template (expected e.g. \"1x[A100-80:tp8x1]\")");
    Template t;
    t.pipelines.push_back(pipeline());
    while (accept(';')) t.pipelines.push_back(pipeline());
    skip_space();
    if (!at_end()) fail(std::string("unexpected '") + s_[pos_] + "' (expected ';' between pipeline classes or the end)");
    return canonical(std::move(t));
  }

 private:
  const std::string& s_;
  const std::string& where_;
  size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& reason) const {
    throw InputError(where_, "at character " + std::to_string(pos_ + 1) + ": " + reason);
  }
  bool at_end() const { return pos_ >= s_.size(); }
  void skip_space() {
    while (!at_end() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool accept(char c) {
    skip_space();
    if (at_end() || s_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c, const std::string& what) {
    if (!accept(c)) fail(std::string("expected '") + c + "' " + what);
  }
  bool accept_word(const std::string& w) {
    skip_space();
    if (s_.compare(pos_, w.size(), w) != 0) return false;
    pos_ += w.size();
    return true;
  }
  // A positive decimal integer (at most 7 digits).
  int positive(const std::string& what) {
    skip_space();
    const size_t begin = pos_;
    while (!at_end() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    if (pos_ == begin) fail("expected " + what + " (a positive integer)");
    if (pos_ - begin > 7) fail(what + " " + s_.substr(begin, pos_ - begin) + " is too large");
    const int v = std::stoi(s_.substr(begin, pos_ - begin));
    if (v < 1) {
      pos_ = begin;
      fail(what + " must be at least 1, got " + std::to_string(v));
    }
    return v;
  }

  PipelineTemplate pipeline() {
    PipelineTemplate p;
    p.replicas = positive("a replica count");
    expect('x', "after the replica count (as in \"2x[...]\")");
    expect('[', "before the stages of a pipeline class");
    p.stages.push_back(stage());
    while (accept('|')) p.stages.push_back(stage());
    expect(']', "after the last stage (stages are separated by '|')");
    return p;
  }

  StageTemplate stage() {
    StageTemplate s;
    s.tp = kind(s.kinds);
    while (accept('+')) {
      const size_t at = pos_;
      const int tp = kind(s.kinds);
      if (tp != s.tp) {
        pos_ = at;
        fail("kinds of one stage share its TP width: " + s.kinds.front().gpu_type + " has tp" + std::to_string(s.tp) + ", " +
             s.kinds.back().gpu_type + " tp" + std::to_string(tp));
      }
    }
    if (accept_word("ep")) ep_clause(s);
    skip_space();
    if (s_.compare(pos_, 6, "uneven") == 0) fail("'uneven' follows an EP clause (as in \"ep8/stage uneven\")");
    return s;
  }

  // TYPE:tpTxN; appends the kind, returns T.
  int kind(std::vector<GroupKind>& kinds) {
    skip_space();
    const size_t begin = pos_;
    while (!at_end() && type_char(s_[pos_])) ++pos_;
    if (pos_ == begin) fail("expected a GPU type (as in \"A100-80:tp4x2\")");
    const std::string type = s_.substr(begin, pos_ - begin);
    if (at_end() || s_[pos_] != ':') fail("expected ':' after the GPU type " + type);
    ++pos_;
    if (s_.compare(pos_, 2, "tp") != 0) fail("expected 'tp' after " + type + ": (as in \"" + type + ":tp4x2\")");
    pos_ += 2;
    const int tp = positive("a TP width");
    expect('x', "between the TP width and the group count (as in \"tp4x2\")");
    kinds.push_back({type, positive("a TP group count")});
    return tp;
  }

  // epE/SCOPE [uneven], after the word "ep".
  void ep_clause(StageTemplate& s) {
    s.ep = positive("an EP width");
    expect('/', "after the EP width (as in \"ep8/stage\")");
    skip_space();
    const size_t begin = pos_;
    while (!at_end() && std::isalpha(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    try {
      s.ep_scope = parse_ep_scope(s_.substr(begin, pos_ - begin));
    } catch (const std::invalid_argument& e) {
      pos_ = begin;
      fail(e.what());
    }
    s.uneven_experts = accept_word("uneven");
  }
};

}  // namespace

bool has_replicas(const Template& t) {
  return std::any_of(t.pipelines.begin(), t.pipelines.end(), [](const PipelineTemplate& c) { return c.replicas > 1; });
}

std::string to_text(const Template& t) {
  std::string out;
  for (size_t i = 0; i < t.pipelines.size(); ++i) {
    if (i > 0) out += "; ";
    out += pipeline_text(t.pipelines[i]);
  }
  return out;
}

Template parse_template(const std::string& text, const std::string& where) { return TextReader(text, where).read(); }

// ------------------------------------------------------------------ YAML form

std::string template_yaml(const Template& t) { return "template: \"" + to_text(t) + "\"\n"; }

Template load_template_yaml(const std::string& path) {
  const YAML::Node root = yaml_fields::load_file(path, "template file");
  if (!root.IsMap() || !root["template"]) throw InputError(path, "expected a mapping with the key 'template'");
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (key != "template") throw InputError(file_where(path, kv.first.Mark().line, key), "unknown key (expected only 'template')");
  }
  const YAML::Node n = root["template"];
  const std::string where = file_where(path, n.Mark().line, "template");
  if (!n.IsScalar()) throw InputError(where, "expected the template's text form as a string");
  return parse_template(n.as<std::string>(), where);
}

// ------------------------------------------------------------------ can the template run on the cluster?

std::map<std::string, std::vector<int>> node_sizes_by_type(const Cluster& cluster) {
  std::map<std::string, std::vector<int>> out;
  std::vector<std::vector<int>*> of_group;  // per node group: its type's list
  for (const NodeGroup& g : cluster.groups) of_group.push_back(&out[g.gpu]);
  for (const Node& n : cluster.nodes) of_group[n.group]->push_back(n.gpus);
  return out;
}

bool tp_divides_heads(int tp, const ModelConfig& model) {
  if (tp < 1) return false;
  return (model.heads <= 0 || model.heads % tp == 0) && (model.kv_heads <= 0 || model.kv_heads % tp == 0);
}

namespace {

std::string type_list(const std::map<std::string, std::vector<int>>& nodes) {
  std::string out;
  for (const auto& [type, sizes] : nodes) out += (out.empty() ? "" : ", ") + type;
  return out;
}

std::string stage_name(size_t i, size_t j) {
  return "pipeline class " + std::to_string(i) + " stage " + std::to_string(j);
}

std::string structure_problem(const Template& t, const ModelConfig& model) {
  if (t.pipelines.empty()) return "the template has no pipelines";
  for (size_t i = 0; i < t.pipelines.size(); ++i) {
    const PipelineTemplate& p = t.pipelines[i];
    const auto name = [i] { return "pipeline class " + std::to_string(i); };
    if (p.replicas < 1) return name() + ": replicas must be at least 1, got " + std::to_string(p.replicas);
    if (p.stages.empty()) return name() + " has no stages";
    if (static_cast<int>(p.stages.size()) > model.layers)
      return name() + " has " + std::to_string(p.stages.size()) + " stages, more than the model's " + std::to_string(model.layers) +
             " layers (a stage holds at least one layer)";
  }
  return "";
}

// Where a stage's problem lies, named only when there is one.
struct StagePlace {
  size_t pipeline = 0, stage = 0;
  std::string name() const { return stage_name(pipeline, stage); }
};

std::string kind_problem(const StageTemplate& s, const StagePlace& where, const std::map<std::string, std::vector<int>>& nodes) {
  if (s.kinds.empty()) return where.name() + " has no TP groups";
  for (const GroupKind& k : s.kinds) {
    if (k.groups < 1) return where.name() + ": " + k.gpu_type + " has " + std::to_string(k.groups) + " TP groups (at least 1)";
    const auto it = nodes.find(k.gpu_type);
    if (it == nodes.end()) return where.name() + ": GPU type " + k.gpu_type + " is not in the cluster (it has " + type_list(nodes) + ")";
    const int largest = *std::max_element(it->second.begin(), it->second.end());
    if (s.tp > largest)
      return where.name() + ": tp" + std::to_string(s.tp) + " on " + k.gpu_type + ", whose nodes have at most " + std::to_string(largest) +
             " GPUs (a TP group lives in one node)";
  }
  return "";
}

std::string tp_problem(const StageTemplate& s, const StagePlace& where, const ModelConfig& model) {
  if (s.tp < 1) return where.name() + ": tp must be at least 1, got " + std::to_string(s.tp);
  if (model.heads > 0 && model.heads % s.tp != 0)
    return where.name() + ": tp=" + std::to_string(s.tp) + " does not divide " + std::to_string(model.heads) + " attention heads";
  if (model.kv_heads > 0 && model.kv_heads % s.tp != 0)
    return where.name() + ": tp=" + std::to_string(s.tp) + " does not divide " + std::to_string(model.kv_heads) + " key/value heads";
  return "";
}

// Mirrors validate_plan (sim/plan/plan_yaml.cpp): EP ranks are the stage's GPUs (scope stage) or the same
// stage of `ep` consecutive pipelines (scope pipelines, Megatron-Core's EP carved out of data parallelism).
std::string ep_problem(const StageTemplate& s, int replicas, const StagePlace& where, const ModelConfig& model) {
  const auto ep = [&s] { return "ep=" + std::to_string(s.ep); };
  if (s.ep < 1) return where.name() + ": ep must be at least 1, got " + std::to_string(s.ep);
  if (!model.moe) {
    if (s.ep != 1) return where.name() + ": " + ep() + " on a dense model (ep must be 1)";
    if (s.uneven_experts) return where.name() + ": uneven experts on a dense model";
    return "";
  }
  const int experts = model.moe->experts;
  if (!s.uneven_experts && experts % s.ep != 0)
    return where.name() + ": " + ep() + " does not divide " + std::to_string(experts) + " experts (an uneven placement may)";
  if (s.uneven_experts && s.ep > experts)
    return where.name() + ": " + ep() + " ranks cannot each hold one of " + std::to_string(experts) + " experts";
  if (s.uneven_experts && s.ep == 1) return where.name() + ": uneven experts need ep > 1";
  if (s.ep_scope == EpScope::Stage && s.gpus() % s.ep != 0)
    return where.name() + ": " + ep() + " does not divide the stage's " + std::to_string(s.gpus()) + " GPUs (ep_scope stage)";
  if (s.ep_scope == EpScope::Pipelines && replicas % s.ep != 0)
    return where.name() + ": " + ep() + " with ep_scope pipelines needs the class's " + std::to_string(replicas) +
           " replicas to be a multiple of ep (an EP block is ep identical pipelines)";
  return "";
}

std::string stage_problems(const Template& t, const std::map<std::string, std::vector<int>>& nodes, const ModelConfig& model) {
  for (size_t i = 0; i < t.pipelines.size(); ++i)
    for (size_t j = 0; j < t.pipelines[i].stages.size(); ++j) {
      const StageTemplate& s = t.pipelines[i].stages[j];
      const StagePlace where{i, j};
      std::string p = tp_problem(s, where, model);
      if (p.empty()) p = kind_problem(s, where, nodes);
      if (p.empty()) p = ep_problem(s, t.pipelines[i].replicas, where, model);
      if (!p.empty()) return p;
    }
  return "";
}

// First-fit decreasing of the type's TP groups into its nodes. Exact when the widths divide one another:
// placing a group of width w anywhere lowers every node's room for narrower widths by the same count.
bool groups_pack(std::vector<int> widths, std::vector<int> room) {
  std::sort(widths.rbegin(), widths.rend());
  for (const int w : widths) {
    const auto it = std::find_if(room.begin(), room.end(), [w](int r) { return r >= w; });
    if (it == room.end()) return false;
    *it -= w;
  }
  return true;
}

std::string capacity_problem(const Template& t, const std::map<std::string, std::vector<int>>& nodes) {
  std::map<std::string, std::vector<int>> widths;  // one entry per TP group
  for (const PipelineTemplate& p : t.pipelines)
    for (const StageTemplate& s : p.stages)
      for (const GroupKind& k : s.kinds) widths[k.gpu_type].insert(widths[k.gpu_type].end(), static_cast<size_t>(p.replicas) * k.groups, s.tp);
  for (const auto& [type, ws] : widths) {
    const std::vector<int>& sizes = nodes.at(type);
    const long have = std::accumulate(sizes.begin(), sizes.end(), 0L);
    const long need = std::accumulate(ws.begin(), ws.end(), 0L);
    if (need > have) return "the template uses " + std::to_string(need) + " " + type + " GPUs, the cluster has " + std::to_string(have);
    if (!groups_pack(ws, sizes))
      return "the template's " + std::to_string(ws.size()) + " TP groups on " + type + " do not fit in its nodes (a TP group lives in one node)";
  }
  return "";
}

}  // namespace

std::string template_problem(const Template& t, const Cluster& cluster, const ModelConfig& model) {
  std::string p = structure_problem(t, model);
  if (!p.empty()) return p;
  const auto nodes = node_sizes_by_type(cluster);
  p = stage_problems(t, nodes, model);
  if (p.empty()) p = capacity_problem(t, nodes);
  return p;
}

}  // namespace arachne::planner
