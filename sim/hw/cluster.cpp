// Clusters from YAML files (configs/clusters/*.yaml) or spec strings ("A100-80:4x8,V100-32:8x4").
#include "sim/hw/cluster.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "sim/io/input_error.h"
#include "sim/io/numbers.h"
#include "sim/io/units.h"
#include "sim/io/yaml_fields.h"

namespace arachne {
namespace {

namespace fs = std::filesystem;

using namespace yaml_fields;

std::string unknown_gpu(const std::string& name, const GpuCatalog& catalog) {
  return "unknown GPU type '" + name + "' (known: " + join(catalog.names()) + ")";
}

NodeGroup group_from_default(const std::string& gpu, int nodes, const NodeDefaults& d) {
  NodeGroup g;
  g.gpu = gpu;
  g.nodes = nodes;
  g.gpus_per_node = d.gpus_per_node;
  g.intra_kind = d.intra_kind;
  g.intra_bw = d.intra_bw;
  g.nic_count = d.nics;
  g.nic_bw = d.nic_bw;
  return g;
}

// Nodes n0, n1, ... in listing order; GPUs numbered consecutively through them.
void build_nodes(Cluster& c) {
  c.nodes.clear();
  GpuId next = 0;
  for (int gi = 0; gi < static_cast<int>(c.groups.size()); ++gi) {
    for (int k = 0; k < c.groups[gi].nodes; ++k) {
      Node n;
      n.id = static_cast<int>(c.nodes.size());
      n.group = gi;
      n.first_gpu = next;
      n.gpus = c.groups[gi].gpus_per_node;
      next += n.gpus;
      c.nodes.push_back(n);
    }
  }
}

NetworkConfig parse_network(const YAML::Node& n, const std::string& file) {
  NetworkConfig net;
  if (!n.IsDefined()) return net;
  const std::string p = "network.";
  check_keys(n, {"topology", "nodes_per_leaf", "oversubscription", "latency"}, file, p);
  if (n["topology"].IsDefined()) {
    net.topology = require_scalar(n, "topology", file, p);
    if (net.topology != "leaf-spine")
      fail(file, n["topology"], p + "topology", "unknown topology '" + net.topology + "' (known: leaf-spine)");
  }
  if (n["nodes_per_leaf"].IsDefined()) net.nodes_per_leaf = whole_number(n, "nodes_per_leaf", limits::kNodesPerLeaf, file, p);
  if (n["oversubscription"].IsDefined()) net.oversubscription = plain_number(n, "oversubscription", limits::kOversubscription, file, p);
  if (n["latency"].IsDefined()) net.latency_s = dimensioned(n, "latency", units::parse_duration, limits::kLatency, file, p);
  return net;
}

NodeGroup parse_group(const YAML::Node& n, int index, const GpuCatalog& catalog, const std::string& file) {
  const std::string p = "node_groups[" + std::to_string(index) + "].";
  if (!n.IsMap()) fail(file, n, p.substr(0, p.size() - 1), "expected a mapping {gpu, nodes, ...}");
  check_keys(n, {"gpu", "nodes", "gpus_per_node", "intra_node", "nic"}, file, p);
  const std::string gpu = require_scalar(n, "gpu", file, p);
  if (!catalog.contains(gpu)) fail(file, n["gpu"], p + "gpu", unknown_gpu(gpu, catalog));
  const NodeDefaults& d = catalog.at(gpu).node;
  NodeGroup g = group_from_default(gpu, whole_number(n, "nodes", limits::kNodes, file, p), d);
  if (n["gpus_per_node"].IsDefined()) g.gpus_per_node = whole_number(n, "gpus_per_node", limits::kGpusPerNode, file, p);

  // intra_node / nic: optional, and each sub-field optional; what is missing comes from the default node.
  if (const YAML::Node intra = optional_map(n, "intra_node", file, p); intra.IsDefined()) {
    const std::string ip = p + "intra_node.";
    check_keys(intra, {"kind", "bandwidth"}, file, ip);
    if (intra["kind"].IsDefined()) {
      try {
        g.intra_kind = parse_link_kind(require_scalar(intra, "kind", file, ip));
      } catch (const std::invalid_argument& e) {
        fail(file, intra["kind"], ip + "kind", e.what());
      }
    }
    if (intra["bandwidth"].IsDefined()) {
      g.intra_bw = dimensioned(intra, "bandwidth", units::parse_bandwidth, limits::kBandwidth, file, ip);
    } else if (g.intra_kind != d.intra_kind) {
      fail(file, intra, ip + "bandwidth",
           std::string("missing field (required when the kind differs from ") + gpu + "'s default node, " +
               to_string(d.intra_kind) + ")");
    }
  }
  if (const YAML::Node nic = optional_map(n, "nic", file, p); nic.IsDefined()) {
    const std::string np = p + "nic.";
    check_keys(nic, {"count", "bandwidth"}, file, np);
    if (nic["count"].IsDefined()) g.nic_count = whole_number(nic, "count", limits::kNicsPerNode, file, np);
    if (nic["bandwidth"].IsDefined()) {
      g.nic_bw = dimensioned(nic, "bandwidth", units::parse_bandwidth, limits::kBandwidth, file, np);
    }
  }
  return g;
}

// The whole cluster within the supported size (sim/io/limits.h), before its nodes and topology are built.
void check_cluster_size(const Cluster& c, const std::string& where) {
  long long gpus = 0;
  for (const NodeGroup& g : c.groups) gpus += static_cast<long long>(g.nodes) * g.gpus_per_node;
  if (gpus > limits::kMaxClusterGpus)
    throw InputError(where, std::to_string(gpus) + " GPUs exceed the supported " +
                                std::to_string(limits::kMaxClusterGpus) + " GPUs per cluster");
}

// A count of a spec item within `range`; the error's where is the spec itself.
int spec_count(const std::string& spec, const std::string& item, const std::string& what, const std::string& text,
               limits::IntRange range) {
  try {
    return read_int(text, range, spec);
  } catch (const InputError& e) {
    throw InputError(spec, "'" + item + "': " + what + ": " + e.reason());
  }
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char ch) { return std::isdigit(ch); });
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> bundled_cluster_names() {
  std::vector<std::string> names;
  std::error_code ec;
  const fs::path dir = fs::path(configs_dir()) / "clusters";
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

int Cluster::total_gpus() const { return nodes.empty() ? 0 : nodes.back().first_gpu + nodes.back().gpus; }

int Cluster::node_of(GpuId g) const {
  if (g < 0 || g >= total_gpus())
    throw std::out_of_range("GPU " + std::to_string(g) + " outside cluster of " + std::to_string(total_gpus()));
  // Last node whose first GPU is <= g.
  const auto it = std::upper_bound(nodes.begin(), nodes.end(), g,
                                   [](GpuId id, const Node& n) { return id < n.first_gpu; });
  return static_cast<int>(std::prev(it) - nodes.begin());
}

std::string Cluster::gpu_label(GpuId g) const {
  const int n = node_of(g);
  return "n" + std::to_string(n) + ":" + std::to_string(g - nodes[n].first_gpu);
}

std::string Cluster::to_yaml() const {
  YAML::Emitter out;
  out << YAML::Comment("cluster " + name + " from " + source);
  out << YAML::BeginMap;
  out << YAML::Key << "version" << YAML::Value << 1;
  out << YAML::Key << "name" << YAML::Value << name;
  char oversub[40];
  std::snprintf(oversub, sizeof oversub, "%.12g", network.oversubscription);
  out << YAML::Key << "network" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "topology" << YAML::Value << network.topology;
  out << YAML::Key << "nodes_per_leaf" << YAML::Value << network.nodes_per_leaf;
  out << YAML::Key << "oversubscription" << YAML::Value << std::string(oversub);
  out << YAML::Key << "latency" << YAML::Value << units::format_duration(network.latency_s);
  out << YAML::EndMap;
  // Every GPU type used, in full: the file is self-contained even if the catalog changes later.
  std::vector<std::string> used;
  for (const NodeGroup& g : groups)
    if (std::find(used.begin(), used.end(), g.gpu) == used.end()) used.push_back(g.gpu);
  out << YAML::Key << "gpus" << YAML::Value << YAML::BeginSeq;
  for (const std::string& gpu : used) emit_gpu_entry(out, catalog.at(gpu));
  out << YAML::EndSeq;
  out << YAML::Key << "node_groups" << YAML::Value << YAML::BeginSeq;
  for (const NodeGroup& g : groups) {
    out << YAML::BeginMap;
    out << YAML::Key << "gpu" << YAML::Value << g.gpu;
    out << YAML::Key << "nodes" << YAML::Value << g.nodes;
    out << YAML::Key << "gpus_per_node" << YAML::Value << g.gpus_per_node;
    out << YAML::Key << "intra_node" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "kind"
        << YAML::Value << to_string(g.intra_kind) << YAML::Key << "bandwidth" << YAML::Value
        << units::format_bandwidth(g.intra_bw) << YAML::EndMap;
    out << YAML::Key << "nic" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "count"
        << YAML::Value << g.nic_count << YAML::Key << "bandwidth" << YAML::Value
        << units::format_bandwidth(g.nic_bw) << YAML::EndMap;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

namespace {

Cluster parse_cluster_root(const YAML::Node& root, const std::string& path, const GpuCatalog& catalog);

}  // namespace

Cluster parse_cluster_yaml(const std::string& path, const GpuCatalog& catalog) {
  return parse_cluster_root(yaml_fields::load_file(path, "cluster file"), path, catalog);
}

Cluster parse_cluster_yaml_text(const std::string& text, const std::string& where, const GpuCatalog& catalog) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    yaml_fields::syntax_error(e, where);
  }
  return parse_cluster_root(root, where, catalog);
}

namespace {

Cluster parse_cluster_root(const YAML::Node& root, const std::string& path, const GpuCatalog& catalog) {
  if (!root.IsMap()) throw InputError(path, "expected a mapping with `node_groups:`");
  check_keys(root, {"version", "name", "network", "gpus", "node_groups"}, path, "");
  if (root["version"].IsDefined() && whole_number(root, "version", limits::kFormatVersion, path, "") != 1)
    fail(path, root["version"], "version", "unsupported version (this program reads version 1)");

  Cluster c;
  c.source = path;
  c.name = root["name"].IsDefined() ? require_scalar(root, "name", path, "") : fs::path(path).stem().string();
  c.network = parse_network(optional_map(root, "network", path, ""), path);
  c.catalog = catalog;

  // Cluster-local GPU types (catalog format); one with a catalog name replaces the catalog's entry.
  // `calibrated_from` is provenance here; it must name a known GPU only when `compute:` is omitted.
  if (const YAML::Node gpus = root["gpus"]; gpus.IsDefined()) {
    if (!gpus.IsSequence()) fail(path, gpus, "gpus", "expected a list of GPU entries (catalog format)");
    std::set<std::string> local;
    for (const YAML::Node& entry : gpus) {
      GpuSpec spec = parse_gpu_entry(entry, path, c.catalog);
      if (!local.insert(spec.name).second)
        fail(path, entry["name"], "gpus." + spec.name, "duplicate GPU '" + spec.name + "'");
      c.catalog.add(std::move(spec));
    }
  }

  const YAML::Node groups = root["node_groups"];
  if (!groups.IsDefined()) fail(path, root, "node_groups", "missing field");
  if (!groups.IsSequence() || groups.size() == 0)
    fail(path, groups, "node_groups", "expected a non-empty list of node groups");
  int index = 0;
  for (const YAML::Node& g : groups) c.groups.push_back(parse_group(g, index++, c.catalog, path));
  check_cluster_size(c, file_where(path, groups.Mark().line, "node_groups"));
  build_nodes(c);
  return c;
}

}  // namespace

Cluster parse_cluster_spec(const std::string& spec, const GpuCatalog& catalog) {
  const std::string form = " (expected TYPE:NODESxGPUS[,TYPE:NODESxGPUS...], e.g. A100-80:4x8,V100-32:8x4)";
  if (trim(spec).empty()) throw InputError("cluster spec '" + spec + "'", "empty" + form);
  Cluster c;
  c.name = trim(spec);
  c.source = spec;
  c.catalog = catalog;
  std::size_t start = 0;
  while (start <= spec.size()) {
    const std::size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string item = trim(spec.substr(start, comma - start));
    start = comma + 1;
    const std::size_t colon = item.rfind(':');
    if (colon == std::string::npos) throw InputError(spec, "'" + item + "' has no ':'" + form);
    const std::string type = trim(item.substr(0, colon));
    std::string counts = trim(item.substr(colon + 1));
    std::transform(counts.begin(), counts.end(), counts.begin(), [](unsigned char ch) { return std::tolower(ch); });
    const std::size_t x = counts.find('x');
    const std::string nodes_text = x == std::string::npos ? "" : trim(counts.substr(0, x));
    const std::string gpus_text = x == std::string::npos ? "" : trim(counts.substr(x + 1));
    if (!all_digits(nodes_text) || !all_digits(gpus_text))
      throw InputError(spec, "'" + item + "': counts must be NODESxGPUS with whole numbers" + form);
    const int nodes = spec_count(spec, item, "nodes", nodes_text, limits::kNodes);
    const int gpus = spec_count(spec, item, "GPUs per node", gpus_text, limits::kGpusPerNode);
    if (!catalog.contains(type)) throw InputError(spec, unknown_gpu(type, catalog));
    // The spec's GPU count wins (a node of that size); links come from the catalog's default node.
    NodeGroup g = group_from_default(type, nodes, catalog.at(type).node);
    g.gpus_per_node = gpus;
    c.groups.push_back(g);
    if (comma == spec.size()) break;
  }
  check_cluster_size(c, spec);
  build_nodes(c);
  return c;
}

Cluster load_cluster(const std::string& arg, const GpuCatalog& catalog) {
  if (trim(arg).empty()) throw InputError("cluster '" + arg + "'", "empty: expected a cluster file, a bundled cluster or a spec TYPE:NODESxGPUS[,...]");
  std::error_code ec;
  if (fs::is_regular_file(arg, ec)) return parse_cluster_yaml(arg, catalog);
  const fs::path bundled = fs::path(configs_dir()) / "clusters" / (arg + ".yaml");
  if (arg.find('/') == std::string::npos && fs::is_regular_file(bundled, ec))
    return parse_cluster_yaml(bundled.string(), catalog);
  const bool looks_like_file = arg.find('/') != std::string::npos || arg.ends_with(".yaml") || arg.ends_with(".yml");
  if (looks_like_file) throw InputError(arg, "cluster file not found");
  if (arg.find(':') == std::string::npos)
    throw InputError(arg, "not a cluster file, a bundled cluster (" + join(bundled_cluster_names()) +
                              ") or a spec TYPE:NODESxGPUS[,...]");
  return parse_cluster_spec(arg, catalog);
}

}  // namespace arachne
