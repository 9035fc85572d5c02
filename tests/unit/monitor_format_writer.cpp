// Writes known events through MonitorMaster for tests/integration/monitor_format.sh, which has
// TensorBoard's reader, torch's SummaryWriter and Python's csv module judge the files. Run once per
// simulated run (RUN = 0, 1, ...): the events it wrote are appended to DIR/manifest.jsonl, one line
// per run. Not a test by itself.
#include <boost/json.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/monitor.h"

using namespace zt;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: monitor_format_writer DIR RUN [EVENTS.jsonl]\n");
    return 2;
  }
  const char* dir = argv[1];
  const int run = std::atoi(argv[2]);
  MonitorConfig tb{true, std::string(dir) + "/tb", "job"}, csv{true, std::string(dir) + "/csv", "job"};
  MonitorMaster monitor(tb, csv, true);
  const int64_t base = int64_t(run) * 1000;
  std::vector<std::vector<MonitorEvent>> calls = {
      {{kMonitorTrainLoss, 10.987654321, base + 0}},
      {{kMonitorLr, 0.0, base + 8}, {kMonitorLossScale, 65536, base + 8, true}},
      {{kMonitorTrainLoss, double(float(2.3456789)), base + 8}},  // a float32 loss, as .item() gives
      {{kMonitorLr, 1e-5, base + 16}, {kMonitorLossScale, 32768.0, base + 16}},
      {{kMonitorTrainLoss, NAN, base + 16}, {kMonitorTrainLoss, INFINITY, base + 24}},
      {{kMonitorLr, 0.1, base + 24}, {kMonitorLr, -1.5e-300, base + 32}, {kMonitorLr, 3e38, base + 40}},
      {{kMonitorEvalLoss, 1e16, (int64_t(1) << 40) + base}, {"Custom tag/with space", 123.0, base + 48}},
      // Just above float's largest (rounds down to it) and beyond float's range (+-inf).
      {{kMonitorLr, 3.40282351e38, base + 56}, {kMonitorLr, -1e39, base + 64}},
  };
  // Or the calls in EVENTS.jsonl: one JSON array per line, of [tag, value, step, as_int].
  if (const char* events = argc > 3 ? argv[3] : nullptr) {
    calls.clear();
    std::ifstream in(events);
    for (std::string text; std::getline(in, text);) {
      calls.emplace_back();
      const boost::json::value line = boost::json::parse(text);
      for (const boost::json::value& e : line.as_array()) {
        const boost::json::array& a = e.as_array();
        calls.back().push_back({std::string(a[0].as_string()), a[1].to_number<double>(), a[2].to_number<int64_t>(),
                                a[3].as_bool()});
      }
    }
  }
  auto json_number = [](double v) {
    if (std::isnan(v)) return std::string("NaN");
    if (std::isinf(v)) return std::string(v > 0 ? "Infinity" : "-Infinity");
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    return std::string(buf);
  };
  std::string line = cat("{\"run\": ", run, ", \"event_file\": \"", monitor.event_file_path(), "\", \"calls\": [");
  for (size_t c = 0; c < calls.size(); ++c) {
    monitor.write_events(calls[c]);
    line += c ? ", [" : "[";
    for (size_t i = 0; i < calls[c].size(); ++i) {
      const MonitorEvent& e = calls[c][i];
      line += cat(i ? ", " : "", "{\"tag\": \"", e.tag, "\", \"value\": ", json_number(e.value), ", \"step\": ", e.step,
                  ", \"as_int\": ", e.as_int ? "true" : "false", "}");
    }
    line += "]";
  }
  line += "]}\n";
  monitor.close();
  std::ofstream(std::string(dir) + "/manifest.jsonl", std::ios::app) << line;
  return 0;
}
