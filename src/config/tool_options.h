// The command-line parsing the tools share (Boost.Program_options): a malformed command line is a
// UsageError (one line, exit 2, from run_tool), --help prints the visible options and --version the
// build (core/build_info.h).
#pragma once

#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>

#include "core/build_info.h"
#include "core/error.h"

namespace zt {

/// Parses argv into `vm`. Returns false after printing `visible` for --help, or the version and the
/// build for --version (the tool then exits 0); either one wins over missing arguments.
/// `hidden` holds the positional arguments' options, which --help does not list. `style`: Boost's
/// command-line style (the default accepts an unambiguous prefix of a long option).
inline bool parse_tool_command_line(int argc, char** argv, const boost::program_options::options_description& visible,
                                    boost::program_options::variables_map& vm,
                                    const boost::program_options::options_description& hidden = {},
                                    const boost::program_options::positional_options_description& positional = {},
                                    int style = boost::program_options::command_line_style::default_style) {
  namespace po = boost::program_options;
  po::options_description version;
  version.add_options()("version", "print the version, the git commit and the build, then exit");
  po::options_description all;
  all.add(visible).add(version).add(hidden);
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).style(style).run(), vm);
    if (vm.count("help")) {
      std::cout << visible << version << "\n";
      return false;
    }
    if (vm.count("version")) {
      std::cout << version_text(std::filesystem::path(argv[0]).filename().string());
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  return true;
}

}  // namespace zt
