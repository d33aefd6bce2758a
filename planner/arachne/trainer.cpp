#include "planner/arachne/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>

#include "planner/arachne/dataset.h"
#include "planner/arachne/features.h"
#include "planner/arachne/labeler.h"
#include "planner/arachne/policy_net.h"
#include "planner/learned_module.h"
#include "planner/template/completion.h"
#include "planner/template/estimator.h"
#include "planner/template/tokens.h"
#include "sim/core/splitmix.h"
#include "sim/io/atomic_file.h"
#include "sim/io/hdf5_writer.h"
#include "sim/io/input_error.h"

namespace arachne::planner {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A beam or sample whose template cannot be completed counts as this fraction of the label's speed in
// the validation quality and earns no reward.
constexpr double kFailedQuality = 0.01;

// One labelled configuration, ready for the network and for pricing.
struct Example {
  std::uint64_t index = 0;
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Topology> topo;
  std::unique_ptr<Estimator> estimator;  // built once: its per-layer tables serve every template priced here
  ModelConfig model;
  long global_batch = 0;
  RequestFeatures features;
  std::vector<std::vector<int>> labels;  // best first
  std::vector<std::vector<std::vector<int>>> allowed;
  double best_label_estimate = 0;
};

RequestFeatures features_of(const ConfigRecord& r) {
  RequestFeatures f;
  f.groups = static_cast<int>(r.group_features.size());
  for (const auto& g : r.group_features)
    for (double x : g) f.group.push_back(static_cast<float>(x));
  for (double x : r.global_features) f.global.push_back(static_cast<float>(x));
  return f;
}

std::vector<Example> load_examples(const std::string& path, const GpuCatalog& catalog, long index_offset) {
  long refused = 0;
  DatasetSchema schema;
  std::vector<ConfigRecord> records;
  try {
    records = read_dataset_h5(path, &schema);
  } catch (const InputError&) {
    throw;  // names the file and the place in it already
  } catch (const std::runtime_error& e) {
    throw InputError(path, std::string("not a gen-data dataset: ") + e.what());
  }
  const DatasetSchema ours = dataset_schema();
  if (schema.vocabulary != ours.vocabulary || schema.group_features != ours.group_features ||
      schema.global_features != ours.global_features)
    throw InputError(path, "made by a build with another token vocabulary or other features; regenerate it with gen-data");
  std::vector<Example> out;
  for (const ConfigRecord& r : records) {
    if (r.labels.empty()) continue;
    Example e;
    e.index = index_offset + r.index;
    e.cluster = std::make_unique<Cluster>(parse_cluster_yaml_text(r.cluster_yaml, path + ": config " + std::to_string(r.index), catalog));
    e.topo = std::make_unique<Topology>(*e.cluster);
    e.model = load_model(r.model);
    e.global_batch = r.global_batch;
    e.features = features_of(r);
    const TokenGrammar grammar(*e.cluster, e.model);
    for (const LabelRecord& l : r.labels) {
      try {
        e.allowed.push_back(allowed_along(grammar, l.tokens, token_id({TokenKind::Bos, 0})));
        e.labels.push_back(l.tokens);
      } catch (const std::invalid_argument&) {
        ++refused;  // a template the policy cannot emit (the grammar masks it): nothing to imitate
        continue;
      }
      if (e.labels.size() == 1) e.best_label_estimate = l.estimated_s;
    }
    if (!e.labels.empty()) out.push_back(std::move(e));
  }
  if (refused > 0)
    std::fprintf(stderr, "train: %s: %ld labels outside the token grammar skipped (the policy cannot emit them)\n",
                 path.c_str(), refused);
  if (out.empty()) throw InputError(path, "no labelled configuration");
  return out;
}

// Once the examples stay where they are: an estimator keeps references to its example's cluster, topology
// and model, so it is built after the last move of the vector.
void attach_estimators(std::vector<Example>& examples) {
  for (Example& e : examples) e.estimator = std::make_unique<Estimator>(*e.cluster, *e.topo, e.model);
}

// The examples of every file of a comma-separated list, in list order; the k-th file's indices are offset by
// k x kFileIndexStride so that they stay distinct (they seed the policy-gradient samples).
constexpr long kFileIndexStride = 1'000'000;
std::vector<Example> load_training_examples(const std::string& paths, const GpuCatalog& catalog) {
  std::vector<Example> out;
  long k = 0;
  for (std::size_t from = 0;; ++k) {
    const std::size_t comma = paths.find(',', from);
    const std::string path = paths.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    if (path.empty()) throw InputError("--data", "an empty file name in '" + paths + "'");
    for (Example& e : load_examples(path, catalog, k * kFileIndexStride)) out.push_back(std::move(e));
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return out;
}

// A permutation drawn from splitmix64, the same on every platform (std::shuffle's is not fixed by the standard).
std::vector<std::size_t> permutation(std::size_t n, std::uint64_t seed) {
  std::vector<std::size_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  SplitMix64(seed).shuffle(p);
  return p;
}

std::uint64_t epoch_seed(std::uint64_t seed, int epoch) { return seed * 0x100000001b3ULL + static_cast<std::uint64_t>(epoch); }

// The best estimate over the completions of a decoded template (nullopt when none fits).
std::optional<double> estimate_tokens(const Example& e, const std::vector<int>& tokens) {
  Template t;
  try {
    t = decode(tokens, type_order(*e.cluster));
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
  const PlanPricer price = [&e](const Plan& p, double) -> std::optional<double> {
    const Estimate x = e.estimator->estimate(p);
    return x.fits ? std::optional<double>(x.iteration_s) : std::nullopt;
  };
  const std::vector<CompletedPlan> done = complete_template(t, {e.cluster.get(), e.topo.get(), &e.model, e.global_batch}, price, {.max_candidates = 1});
  if (done.empty()) return std::nullopt;
  return done.front().priced_s;
}

struct LabelRef {
  std::size_t example, label;
};

std::vector<LabelRef> label_refs(const std::vector<Example>& ex) {
  std::vector<LabelRef> refs;
  for (std::size_t i = 0; i < ex.size(); ++i)
    for (std::size_t l = 0; l < ex[i].labels.size(); ++l) refs.push_back({i, l});
  return refs;
}

TrainingSequence sequence(const Example& e, std::size_t label) {
  return {e.features, e.labels[label], e.allowed[label], 0.0, 0};
}

double imitation_epoch(LearnedPolicy& policy, const std::vector<Example>& ex, int batch, std::uint64_t seed) {
  const std::vector<LabelRef> refs = label_refs(ex);
  const std::vector<std::size_t> order = permutation(refs.size(), seed);
  double sum = 0;
  int steps = 0;
  for (std::size_t b = 0; b < order.size(); b += static_cast<std::size_t>(batch)) {
    std::vector<TrainingSequence> seqs;
    for (std::size_t k = b; k < std::min(order.size(), b + static_cast<std::size_t>(batch)); ++k)
      seqs.push_back(sequence(ex[refs[order[k]].example], refs[order[k]].label));
    sum += policy.imitation_step(TrainingBatch(policy.shape(), seqs));
    ++steps;
  }
  return steps ? sum / steps : 0;
}

double validation_loss(LearnedPolicy& policy, const std::vector<Example>& ex, int batch) {
  const std::vector<LabelRef> refs = label_refs(ex);
  double sum = 0;
  std::size_t n = 0;
  for (std::size_t b = 0; b < refs.size(); b += static_cast<std::size_t>(batch)) {
    std::vector<TrainingSequence> seqs;
    for (std::size_t k = b; k < std::min(refs.size(), b + static_cast<std::size_t>(batch)); ++k)
      seqs.push_back(sequence(ex[refs[k].example], refs[k].label));
    sum += policy.imitation_loss(TrainingBatch(policy.shape(), seqs)) * static_cast<double>(seqs.size());
    n += seqs.size();
  }
  return n ? sum / static_cast<double>(n) : 0;
}

// Geometric mean over the examples of best-label estimate / best beam estimate.
double validation_quality(const LearnedPolicy& policy, const std::vector<Example>& ex, int beam) {
  const PolicyNet net(policy.weights());
  double log_sum = 0;
  for (const Example& e : ex) {
    double best = std::numeric_limits<double>::infinity();
    for (const DecodedSequence& d : net.beam(e.features, TokenGrammar(*e.cluster, e.model), beam))
      if (const auto s = estimate_tokens(e, d.tokens)) best = std::min(best, *s);
    const double q = std::isfinite(best) ? e.best_label_estimate / best : kFailedQuality;
    log_sum += std::log(q);
  }
  return std::exp(log_sum / static_cast<double>(ex.size()));
}

double policy_gradient_epoch(LearnedPolicy& policy, const std::vector<Example>& ex, const TrainerOptions& opt,
                             std::uint64_t seed, double* mean_reward) {
  const std::vector<std::size_t> order = permutation(ex.size(), seed);
  const std::size_t per_step = static_cast<std::size_t>(std::max(1, opt.batch / std::max(1, opt.pg_samples)));
  double loss_sum = 0, reward_sum = 0;
  int steps = 0;
  long samples = 0;
  for (std::size_t b = 0; b < order.size(); b += per_step) {
    const PolicyNet net(policy.weights());
    std::vector<TrainingSequence> seqs;
    for (std::size_t k = b; k < std::min(order.size(), b + per_step); ++k) {
      const Example& e = ex[order[k]];
      std::mt19937_64 rng(seed ^ (0x9e3779b97f4a7c15ULL * (e.index + 1)));
      const TokenGrammar grammar(*e.cluster, e.model);
      for (int s = 0; s < opt.pg_samples; ++s) {
        const DecodedSequence d = net.sample(e.features, GrammarAdapter<TokenGrammar>(grammar), rng);
        // A sample stopped by the step limit earns nothing, as one that cannot be completed does.
        const std::optional<double> est = d.complete ? estimate_tokens(e, d.tokens) : std::nullopt;
        const double reward = est ? e.best_label_estimate / *est : 0.0;
        seqs.push_back({e.features, d.tokens, allowed_along(grammar, d.tokens, token_id({TokenKind::Bos, 0}), !d.complete),
                        reward, static_cast<int64_t>(k)});
        reward_sum += reward;
        ++samples;
      }
    }
    loss_sum += policy.policy_gradient_step(TrainingBatch(policy.shape(), seqs));
    ++steps;
  }
  *mean_reward = samples ? reward_sum / static_cast<double>(samples) : 0;
  return steps ? loss_sum / steps : 0;
}

// ---------------------------------------------------------------------------------- journal, files

std::string journal_path(const std::string& dir) { return (fs::path(dir) / "journal.json").string(); }
std::string epoch_checkpoint(const std::string& dir, int epoch) {
  return (fs::path(dir) / ("checkpoint-" + std::to_string(epoch) + ".pt")).string();
}

json record_json(const EpochRecord& r) {
  return {{"epoch", r.epoch}, {"phase", r.phase}, {"train_loss", r.train_loss}, {"val_loss", r.val_loss},
          {"val_quality", r.val_quality}, {"train_reward", r.train_reward}, {"wall_s", r.wall_s}};
}

EpochRecord record_of(const json& j) {
  return {j.at("epoch").get<int>(), j.at("phase").get<std::string>(), j.at("train_loss").get<double>(),
          j.at("val_loss").get<double>(), j.at("val_quality").get<double>(), j.at("train_reward").get<double>(),
          j.at("wall_s").get<double>()};
}

std::vector<EpochRecord> read_journal(const TrainerOptions& opt) {
  std::ifstream in(journal_path(opt.out_dir));
  if (!in) return {};
  json j;
  try {
    in >> j;
  } catch (const json::exception&) {
    throw InputError(journal_path(opt.out_dir), "unreadable training journal; remove it to start again");
  }
  if (j.value("options", std::string()) != opt.text())
    throw InputError("--resume", "the journal in " + opt.out_dir + " was written with other options");
  std::vector<EpochRecord> out;
  for (const json& r : j.at("epochs")) out.push_back(record_of(r));
  return out;
}

void write_journal(const TrainerOptions& opt, const std::vector<EpochRecord>& epochs) {
  json j{{"options", opt.text()}, {"epochs", json::array()}};
  for (const EpochRecord& r : epochs) j["epochs"].push_back(record_json(r));
  write_text_atomically(journal_path(opt.out_dir), j.dump(1) + "\n");
}

// The epoch's checkpoint (atomic: written to a temporary file, renamed when complete), then the
// journal that names it, then the previous checkpoint is removed.
void save_epoch(LearnedPolicy& policy, const TrainerOptions& opt, const std::vector<EpochRecord>& epochs) {
  const int epoch = epochs.back().epoch;
  write_file_atomically(epoch_checkpoint(opt.out_dir, epoch), [&](const std::string& tmp) { policy.save(tmp); });
  write_journal(opt, epochs);
  std::error_code ec;
  fs::remove(epoch_checkpoint(opt.out_dir, epoch - 1), ec);
}

void write_curves(const TrainerOptions& opt, const std::vector<EpochRecord>& epochs, const std::string& version,
                  const std::string& command_line) {
  h5::write_h5_atomically(curves_path(opt.out_dir), {version, command_line, opt.seed, opt.text()}, [&](h5::File& f) {
    h5::Table t(f, "/epochs",
                {{"epoch", h5::ColumnType::Int64, "1"}, {"phase", h5::ColumnType::String, "-"},
                 {"train_loss", h5::ColumnType::Float64, "nats/token"}, {"val_loss", h5::ColumnType::Float64, "nats/token"},
                 {"val_quality", h5::ColumnType::Float64, "1"}, {"train_reward", h5::ColumnType::Float64, "1"},
                 {"wall_s", h5::ColumnType::Float64, "s"}});
    std::vector<h5::Row> rows;
    for (const EpochRecord& r : epochs)
      rows.push_back({static_cast<std::int64_t>(r.epoch), r.phase, r.train_loss, r.val_loss, r.val_quality, r.train_reward, r.wall_s});
    t.append(rows);
  });
}

PolicyShape network_shape(const TrainerOptions& opt) {
  PolicyShape s;
  s.group_features = kGroupFeatures;
  s.global_features = kGlobalFeatures;
  s.vocabulary = vocabulary_size();
  s.bos_token = token_id({TokenKind::Bos, 0});
  for (int k = 0; k < kMaxGpuTypes; ++k) s.type_tokens.push_back(token_id({TokenKind::Type, k}));
  s.encoder_width = opt.encoder_width;
  s.token_width = opt.token_width;
  s.decoder_width = opt.decoder_width;
  return s;
}

LearnedPolicy start_or_resume(const ArachneLearnedModule& module, const TrainerOptions& opt, std::vector<EpochRecord>& epochs) {
  if (opt.resume) epochs = read_journal(opt);
  if (!epochs.empty()) return LearnedPolicy::load(module, epoch_checkpoint(opt.out_dir, epochs.back().epoch), opt.threads);
  return LearnedPolicy(module, network_shape(opt), {opt.seed, opt.threads, opt.learning_rate, 1.0});
}

}  // namespace

std::string TrainerOptions::text() const {
  std::ostringstream s;
  // The epoch counts are left out: a resumed run may go on for more epochs (epoch e's result does not
  // depend on how many follow it).
  s << "data " << data << "\nvalidation " << validation << "\nbatch " << batch << "\npg_samples " << pg_samples << "\nvalidate_beam " << validate_beam
    << "\nmax_validation " << max_validation << "\nseed " << seed << "\nthreads " << threads << "\nlearning_rate "
    << learning_rate << "\npg_learning_rate " << pg_learning_rate << "\nwidths " << encoder_width << " " << token_width << " " << decoder_width << "\n";
  return s.str();
}

std::string weights_path(const std::string& out_dir) { return (fs::path(out_dir) / "policy.weights").string(); }
std::string curves_path(const std::string& out_dir) { return (fs::path(out_dir) / "training.h5").string(); }

std::vector<EpochRecord> run_training(const TrainerOptions& opt, const ArachneLearnedModule& module,
                                      const std::string& program_version, const std::string& command_line,
                                      const std::function<void(const EpochRecord&)>& progress) {
  const GpuCatalog catalog = GpuCatalog::load_default();
  std::vector<Example> train = load_training_examples(opt.data, catalog);
  std::vector<Example> val = load_examples(opt.validation, catalog, 0);
  if (static_cast<int>(val.size()) > opt.max_validation) val.resize(static_cast<std::size_t>(opt.max_validation));
  attach_estimators(train);
  attach_estimators(val);
  fs::create_directories(opt.out_dir);
  std::vector<EpochRecord> epochs;
  LearnedPolicy policy = start_or_resume(module, opt, epochs);
  if (epochs.empty()) {  // epoch 0: the untrained policy, the reference of every later epoch
    const auto start = std::chrono::steady_clock::now();
    EpochRecord r{0, "untrained", validation_loss(policy, train, opt.batch), validation_loss(policy, val, opt.batch),
                  validation_quality(policy, val, opt.validate_beam), 0, 0};
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    epochs.push_back(r);
    save_epoch(policy, opt, epochs);
    if (progress) progress(r);
  }
  for (int epoch = epochs.back().epoch + 1; epoch <= opt.imitation_epochs + opt.pg_epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    EpochRecord r;
    r.epoch = epoch;
    if (epoch <= opt.imitation_epochs) {
      r.phase = "imitation";
      r.train_loss = imitation_epoch(policy, train, opt.batch, epoch_seed(opt.seed, epoch));
    } else {
      r.phase = "policy-gradient";
      policy.set_learning_rate(opt.pg_learning_rate);
      r.train_loss = policy_gradient_epoch(policy, train, opt, epoch_seed(opt.seed, epoch), &r.train_reward);
    }
    r.val_loss = validation_loss(policy, val, opt.batch);
    r.val_quality = validation_quality(policy, val, opt.validate_beam);
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    epochs.push_back(r);
    save_epoch(policy, opt, epochs);
    if (progress) progress(r);
  }
  policy.export_weights(weights_path(opt.out_dir));  // atomic: write_policy_weights
  write_curves(opt, epochs, program_version, command_line);
  return epochs;
}

}  // namespace arachne::planner
