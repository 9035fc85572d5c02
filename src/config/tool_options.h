// The command-line parsing the tools share (Boost.Program_options): a malformed command line is a
// UsageError (one line, exit 2, from run_tool), and --help prints the visible options.
#pragma once

#include <boost/program_options.hpp>
#include <iostream>

#include "core/error.h"

namespace zt {

/// Parses argv into `vm`. Returns false after printing `visible` for --help (the tool then exits 0).
/// `hidden` holds the positional arguments' options, which --help does not list. `style`: Boost's
/// command-line style (the default accepts an unambiguous prefix of a long option).
inline bool parse_tool_command_line(int argc, char** argv, const boost::program_options::options_description& visible,
                                    boost::program_options::variables_map& vm,
                                    const boost::program_options::options_description& hidden = {},
                                    const boost::program_options::positional_options_description& positional = {},
                                    int style = boost::program_options::command_line_style::default_style) {
  namespace po = boost::program_options;
  po::options_description all;
  all.add(visible).add(hidden);
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).style(style).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  if (vm.count("help")) {
    std::cout << visible << "\n";
    return false;
  }
  return true;
}

}  // namespace zt
