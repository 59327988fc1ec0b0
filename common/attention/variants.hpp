// One way to name a variant, in every attention stage: a registry of the stage's rungs (the ladder,
// in the chapter's order) and its ablations (a rung with one change, run only when --variants names
// it). Each entry says what it is called, what it runs (dtypes, head dimensions), one line for
// --help, and the stage's own plan and launcher. `--variants` takes names from it, `--help` lists it.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "attention/shape.hpp"
#include "attention/tiles.hpp"
#include "dtype.hpp"

namespace attention {

// What every stage's variant has: its name, what it runs, and its line in --help.
struct VariantInfo {
  std::string name;
  std::vector<course::Dtype> dtypes;
  std::vector<int> ds;  // head dimensions
  std::string summary;  // one line: what it changes from the rung before, or what it is
  bool supports(course::Dtype t, int d) const;
};

// A forward pass on device pointers (stages 06, 08, 10): Q, K, V, O hold values of the run's dtype;
// L is floats. Empty in a build without the stage's kernels.
using ForwardLaunch = std::function<void(const Shape&, course::Dtype, const void* Q, const void* K,
                                         const void* V, void* O, float* L)>;
struct ForwardVariant : VariantInfo {
  Tiles (*tiles)(const Shape& s);  // the block sizes a problem runs with (the model, the CPU count)
  ForwardLaunch launch;
};

// Throws UsageError, naming what is supported, unless `v` runs (dtype, d).
void require_supported(const VariantInfo& v, course::Dtype t, int d);

// A stage's variants: its rungs, then its ablations. V derives from VariantInfo.
template <class V>
class Registry {
 public:
  Registry(std::string stage, std::vector<V> rungs, std::vector<V> ablations = {});
  const std::vector<V>& rungs() const { return rungs_; }
  const std::vector<V>& ablations() const { return ablations_; }
  bool has(const std::string& name) const { return lookup(name) != nullptr; }
  bool is_ablation(const std::string& name) const;
  // The variant called `name`, a rung or an ablation; UsageError listing the names otherwise.
  const V& find(const std::string& name) const;
  // The rungs' names, then (with_ablations) the ablations'.
  std::vector<std::string> names(bool with_ablations = true) const;
  // --help's list: a line a variant, rungs and ablations apart.
  std::string help() const;
  const std::string& stage() const { return stage_; }

 private:
  const V* lookup(const std::string& name) const;
  std::string stage_;
  std::vector<V> rungs_, ablations_;
};

// The text of a registry's --help list (Registry::help), from the entries' names and summaries.
std::string variants_help(const std::vector<const VariantInfo*>& rungs,
                          const std::vector<const VariantInfo*>& ablations,
                          const std::vector<const VariantInfo*>& beside = {});

// What one variant takes, for checking a program's options before any work.
struct Takes {
  std::string name;
  std::vector<course::Dtype> dtypes;
  std::vector<int> ds;
};
template <class Variant>
std::vector<Takes> takes_of(const std::vector<Variant>& variants) {
  std::vector<Takes> out;
  for (const auto& v : variants) out.push_back({v.name, v.dtypes, v.ds});
  return out;
}

// The dtypes of `wanted` that some variant runs with head dimension d; only the variants named in
// `selected` count, unless it is empty (no --variants). Throws UsageError, saying what runs with
// which d, when nothing would run, when a dtype the user asked for (`dtypes_given`: --dtype was
// given) runs with no variant, or when a variant the user named runs none of the dtypes.
std::vector<course::Dtype> dtypes_to_run(const std::vector<Takes>& variants,
                                         const std::vector<std::string>& selected,
                                         const std::vector<course::Dtype>& wanted, bool dtypes_given,
                                         int d);

// ---- Registry's members ----

// UsageError: "stage 08 has no variant 'x' (its variants: a, b, ...)".
[[noreturn]] void throw_unknown_variant(const std::string& stage, const std::string& name,
                                        const std::vector<std::string>& known);

template <class V>
Registry<V>::Registry(std::string stage, std::vector<V> rungs, std::vector<V> ablations)
    : stage_(std::move(stage)), rungs_(std::move(rungs)), ablations_(std::move(ablations)) {}

template <class V>
const V* Registry<V>::lookup(const std::string& name) const {
  for (const auto* list : {&rungs_, &ablations_})
    for (const V& v : *list)
      if (v.name == name) return &v;
  return nullptr;
}

template <class V>
bool Registry<V>::is_ablation(const std::string& name) const {
  for (const V& v : ablations_)
    if (v.name == name) return true;
  return false;
}

template <class V>
const V& Registry<V>::find(const std::string& name) const {
  if (const V* v = lookup(name)) return *v;
  throw_unknown_variant(stage_, name, names());
}

template <class V>
std::vector<std::string> Registry<V>::names(bool with_ablations) const {
  std::vector<std::string> out;
  for (const V& v : rungs_) out.push_back(v.name);
  if (with_ablations)
    for (const V& v : ablations_) out.push_back(v.name);
  return out;
}

template <class V>
std::string Registry<V>::help() const {
  std::vector<const VariantInfo*> r, a;
  for (const V& v : rungs_) r.push_back(&v);
  for (const V& v : ablations_) a.push_back(&v);
  return variants_help(r, a);
}

}  // namespace attention
