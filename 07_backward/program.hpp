// The program of the backward stages (program.cpp): stage 07's, and stage 11's with its own rungs.
#pragma once

#include <string>
#include <vector>

#include "variants.hpp"

namespace attention {

struct BackwardProgram {
  std::string stage;        // the program's name, and the CSV's stage column
  std::string description;  // one line, for --help
  const Registry<BwdVariant>& registry;
  // Run beside the rungs by default, on the same inputs (stage 11: stage 07's fastest, "07_<name>").
  std::vector<BwdVariant> beside = {};
  // The forward of FlashAttention's variants (O and L, and what --with-forward times), with a
  // launcher: stage 06's fastest when null; stage 11: stage 08's.
  const ForwardVariant* forward = nullptr;
};

// Parses the options (the problem's, the common ones and the backward's own), runs every selected
// variant on every problem and writes the table and the CSV; the process's exit code.
int run_backward_program(const BackwardProgram& program, int argc, char** argv);

}  // namespace attention
