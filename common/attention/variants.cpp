#include "attention/variants.hpp"

#include <algorithm>

#include "check.hpp"

namespace attention {

using course::Dtype;

bool VariantInfo::supports(Dtype t, int d) const {
  return std::count(dtypes.begin(), dtypes.end(), t) && std::count(ds.begin(), ds.end(), d);
}

void require_supported(const VariantInfo& v, Dtype t, int d) {
  if (v.supports(t, d)) return;
  std::string dtypes, ds;
  for (Dtype x : v.dtypes) dtypes += std::string(dtypes.empty() ? "" : ", ") + course::name(x);
  for (int x : v.ds) ds += (ds.empty() ? "" : ", ") + std::to_string(x);
  throw course::UsageError(v.name + " runs " + dtypes + " with d in {" + ds + "}, not " +
                           course::name(t) + " with d = " + std::to_string(d));
}

void throw_unknown_variant(const std::string& stage, const std::string& name, const std::vector<std::string>& known) {
  std::string list;
  for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
  throw course::UsageError("stage " + stage + " has no variant '" + name + "' (its variants: " + list + ")");
}

std::string variants_help(const std::vector<const VariantInfo*>& rungs, const std::vector<const VariantInfo*>& ablations,
                          const std::vector<const VariantInfo*>& beside) {
  std::size_t width = 0;
  for (const auto* list : {&rungs, &ablations, &beside})
    for (const VariantInfo* v : *list) width = std::max(width, v->name.size());
  auto lines = [&](const char* title, const std::vector<const VariantInfo*>& list) {
    if (list.empty()) return std::string();
    std::string text = std::string(title) + "\n";
    for (const VariantInfo* v : list) text += "  " + v->name + std::string(width + 2 - v->name.size(), ' ') + v->summary + "\n";
    return text;
  };
  return lines("Variants, in the chapter's order (run by default):", rungs) +
         lines("Run beside them, from earlier stages:", beside) +
         lines("Ablations (a rung with one change; run only when --variants names them):", ablations);
}

namespace {

// "a, b or c" (join(parts, ", ", " or ")).
std::string join(const std::vector<std::string>& parts, const std::string& between, const std::string& last) {
  std::string text;
  for (std::size_t i = 0; i < parts.size(); ++i)
    text += (i == 0 ? "" : i + 1 == parts.size() ? last : between) + parts[i];
  return text;
}

bool takes(const Takes& v, Dtype t, int d) {
  return std::count(v.dtypes.begin(), v.dtypes.end(), t) && std::count(v.ds.begin(), v.ds.end(), d);
}

// "fp32 with d = 32, 64 or 128; fp16 with d = 64 or 128; ...": what the variants run, by dtype.
std::string what_runs(const std::vector<const Takes*>& variants) {
  std::vector<std::string> parts;
  for (Dtype t : {Dtype::fp32, Dtype::fp16, Dtype::bf16}) {
    std::vector<std::string> ds;
    for (int d : {32, 64, 128}) {
      bool any = false;
      for (const Takes* v : variants) any = any || takes(*v, t, d);
      if (any) ds.push_back(std::to_string(d));
    }
    if (!ds.empty()) parts.push_back(std::string(course::name(t)) + " with d = " + join(ds, ", ", " or "));
  }
  return join(parts, "; ", "; ");
}

}  // namespace

std::vector<Dtype> dtypes_to_run(const std::vector<Takes>& variants, const std::vector<std::string>& selected,
                                 const std::vector<Dtype>& wanted, bool dtypes_given, int d) {
  std::vector<const Takes*> chosen;
  for (const Takes& v : variants)
    if (selected.empty() || std::count(selected.begin(), selected.end(), v.name)) chosen.push_back(&v);
  const std::string which = selected.empty() ? "this stage's variants run " : "the variants chosen run ";
  std::vector<Dtype> runs;
  for (Dtype t : wanted) {
    bool any = false;
    for (const Takes* v : chosen) any = any || takes(*v, t, d);
    if (any) {
      runs.push_back(t);
    } else if (dtypes_given) {
      throw course::UsageError(std::string("--dtype ") + course::name(t) + " with --d " + std::to_string(d) +
                               ": nothing runs it; " + which + what_runs(chosen));
    }
  }
  if (runs.empty()) {
    std::vector<std::string> names;
    for (Dtype t : wanted) names.push_back(course::name(t));
    throw course::UsageError("nothing runs " + join(names, ", ", " or ") + " with --d " + std::to_string(d) + "; " +
                             which + what_runs(chosen));
  }
  if (!selected.empty()) {
    for (const Takes* v : chosen) {
      bool any = false;
      for (Dtype t : runs) any = any || takes(*v, t, d);
      if (!any) {
        std::vector<std::string> names;
        for (Dtype t : wanted) names.push_back(course::name(t));
        throw course::UsageError("--variants " + v->name + " runs " + what_runs({v}) + ", not " +
                                 join(names, ", ", " or ") + " with --d " + std::to_string(d));
      }
    }
  }
  return runs;
}

}  // namespace attention
