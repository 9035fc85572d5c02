// The monitors' file formats: CRC-32C and TFRecord framing, Event protobufs read back with the
// generated classes, CSV rows as Python's csv module writes them, DeepSpeed's file layout, and
// a failed write or directory that names the file.
#include <gtest/gtest.h>
#include <boost/json.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "train/csv_monitor.h"
#include "train/monitor.h"
#include "train/proto/tensorboard_event.pb.h"
#include "train/tensorboard_writer.h"

namespace fs = std::filesystem;
using namespace zt;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "zt_monitor_XXXXXX").string();
    ZT_CHECK(mkdtemp(templ.data()) != nullptr, strerror(errno));
    path = templ;
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

uint64_t load_le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | uint8_t(s[at + size_t(i)]);
  return v;
}

// Parses a TFRecord file, checking both CRCs of every record, and decodes each Event.
std::vector<tensorboard::Event> read_records(const std::string& bytes) {
  std::vector<tensorboard::Event> events;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_LE(at + 12, bytes.size()) << "truncated header";
    const uint64_t length = load_le(bytes, at, 8);
    EXPECT_EQ(load_le(bytes, at + 8, 4), masked_crc32c(bytes.substr(at, 8))) << "length CRC at " << at;
    at += 12;
    EXPECT_LE(at + length + 4, bytes.size()) << "truncated record";
    const std::string data = bytes.substr(at, length);
    EXPECT_EQ(load_le(bytes, at + length, 4), masked_crc32c(data)) << "data CRC at " << at;
    at += length + 4;
    tensorboard::Event event;
    EXPECT_TRUE(event.ParseFromString(data));
    events.push_back(event);
  }
  return events;
}

// Python's repr of a float, derived independently of the code under test: the fewest significant
// digits (printf's correctly rounded %.*e) that read back to the same double, then Python's
// layout rule: with value = 0.DIGITS x 10^decpt, positional for -4 < decpt <= 16 (".0" added to
// an integer), else d.ddd e±XX with at least two exponent digits.
std::string reference_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, std::fabs(v));
    if (std::strtod(buf, nullptr) == std::fabs(v)) break;
  }
  std::string s = buf;
  const size_t e = s.find('e');
  std::string digits = s.substr(0, 1) + (e > 1 ? s.substr(2, e - 2) : "");
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = std::atoi(s.c_str() + e + 1) + 1;
  const int n = int(digits.size());
  std::string out = std::signbit(v) ? "-" : "";
  if (-4 < decpt && decpt <= 16) {
    if (decpt <= 0) return out + "0." + std::string(size_t(-decpt), '0') + digits;
    if (decpt >= n) return out + digits + std::string(size_t(decpt - n), '0') + ".0";
    return out + digits.substr(0, size_t(decpt)) + "." + digits.substr(size_t(decpt));
  }
  out += digits.substr(0, 1) + (n > 1 ? "." + digits.substr(1) : "");
  char exp[16];
  std::snprintf(exp, sizeof(exp), "e%c%02d", decpt - 1 < 0 ? '-' : '+', std::abs(decpt - 1));
  return out + exp;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Crc32c, CheckValueAndMaskedForm) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);  // the CRC catalogue's check value for CRC-32C
  EXPECT_EQ(crc32c(""), 0u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of ones, ascending.
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[size_t(i)] = char(i);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  // Masking: rotate right by 15, add 0xa282ead8 (mod 2^32).
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789"), uint32_t(((c >> 15) | (c << 17)) + 0xa282ead8u));
  EXPECT_EQ(masked_crc32c("123456789"), 0xC78AB0E5u);
}

TEST(TfRecord, Framing) {
  const std::string data = "hello";
  const std::string rec = frame_tfrecord(data);
  ASSERT_EQ(rec.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(load_le(rec, 0, 8), data.size());
  EXPECT_EQ(load_le(rec, 8, 4), masked_crc32c(rec.substr(0, 8)));
  EXPECT_EQ(rec.substr(12, data.size()), data);
  EXPECT_EQ(load_le(rec, 12 + data.size(), 4), masked_crc32c(data));
}

TEST(EventFile, RecordsReadBack) {
  TempDir tmp;
  const std::string path = (tmp.path / "events").string();
  const double before = wall_clock_seconds();
  auto writer = EventFileWriter::at_path(path);
  writer->add_scalar("Train/Samples/train_loss", 10.25, 0, 1700000000.5);
  writer->add_scalar("Train/Samples/lr", 0.0, 8, 1700000001.25);  // a 0.0 must still be written
  writer->add_scalar("Train/Samples/loss_scale", 65536.0, 1LL << 40, 1700000002.0);
  writer->add_scalar("Train/Samples/lr", 1e-4, 16, 1700000003.0);  // not exact in float
  // The first event is on disk at once; the scalars only after flush.
  EXPECT_EQ(read_records(read_file(path)).size(), 1u);
  writer->flush();
  const std::vector<tensorboard::Event> events = read_records(read_file(path));
  writer->close();
  ASSERT_EQ(events.size(), 5u);

  const tensorboard::Event& first = events[0];
  EXPECT_EQ(first.what_case(), tensorboard::Event::kFileVersion);
  EXPECT_EQ(first.file_version(), "brain.Event:2");
  EXPECT_EQ(first.source_metadata().writer(), "zerotrain");
  EXPECT_EQ(first.step(), 0);
  EXPECT_GE(first.wall_time(), before);
  EXPECT_LE(first.wall_time(), wall_clock_seconds());

  struct Want {
    const char* tag;
    float value;
    int64_t step;
    double wall_time;
  } want[] = {{"Train/Samples/train_loss", 10.25f, 0, 1700000000.5},
              {"Train/Samples/lr", 0.0f, 8, 1700000001.25},
              {"Train/Samples/loss_scale", 65536.0f, 1LL << 40, 1700000002.0},
              {"Train/Samples/lr", float(1e-4), 16, 1700000003.0}};
  for (size_t i = 0; i < 4; ++i) {
    const tensorboard::Event& e = events[i + 1];
    SCOPED_TRACE(want[i].tag);
    EXPECT_EQ(e.what_case(), tensorboard::Event::kSummary);
    EXPECT_EQ(e.step(), want[i].step);
    EXPECT_EQ(e.wall_time(), want[i].wall_time);
    EXPECT_FALSE(e.has_source_metadata());
    ASSERT_EQ(e.summary().value_size(), 1);
    const tensorboard::Summary::Value& v = e.summary().value(0);
    EXPECT_EQ(v.tag(), want[i].tag);
    EXPECT_EQ(v.value_case(), tensorboard::Summary::Value::kSimpleValue);
    EXPECT_EQ(v.simple_value(), want[i].value);
  }
}

TEST(EventFile, TensorBoardFileName) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const std::string a = tensorboard_event_file_name(1700000000.9), b = tensorboard_event_file_name(12.0);
  const std::regex pattern(std::string(R"(events\.out\.tfevents\.(\d{10})\.)") + host + R"(\.)" +
                           std::to_string(getpid()) + R"(\.(\d+))");
  std::smatch ma, mb;
  ASSERT_TRUE(std::regex_match(a, ma, pattern)) << a;
  ASSERT_TRUE(std::regex_match(b, mb, pattern)) << b;
  EXPECT_EQ(ma[1], "1700000000");  // seconds, truncated, ten digits
  EXPECT_EQ(mb[1], "0000000012");
  EXPECT_EQ(std::stoi(mb[2]), std::stoi(ma[2]) + 1);  // the process's count of event files
}

TEST(Csv, PythonFloatRepr) {
  // Cases the layout rule decides, worked out by hand from it.
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(65536.0), "65536.0");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");  // decpt -3: positional
  EXPECT_EQ(python_float_repr(1e-5), "1e-05");     // decpt -4: exponent, two digits
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1.5e300), "1.5e+300");
  EXPECT_EQ(python_float_repr(-2.5), "-2.5");
  EXPECT_EQ(python_float_repr(0.0), "0.0");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
  EXPECT_EQ(python_float_repr(NAN), "nan");
  EXPECT_EQ(python_float_repr(INFINITY), "inf");
  EXPECT_EQ(python_float_repr(-INFINITY), "-inf");
  // Against the independent derivation, across magnitudes and digit counts.
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<double> mantissa(1.0, 10.0);
  std::uniform_int_distribution<int> exponent(-320, 308), digits(1, 17);
  for (int i = 0; i < 20000; ++i) {
    double v = mantissa(rng) * std::pow(10.0, exponent(rng));
    if (i % 2) {  // short decimals too, as lr and loss values often are
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.*e", digits(rng) - 1, v);
      v = std::strtod(buf, nullptr);
    }
    if (i % 3 == 0) v = -v;
    if (!std::isfinite(v)) continue;
    ASSERT_EQ(python_float_repr(v), reference_repr(v)) << "value " << std::hexfloat << v;
  }
  for (double v : {5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 0.30000000000000004,
                   123456789012345678.0, 9007199254740993.0, 3.0517578125e-05, 1e-4 - 1e-20}) {
    EXPECT_EQ(python_float_repr(v), reference_repr(v)) << std::hexfloat << v;
  }
}

TEST(Csv, RowQuoting) {
  EXPECT_EQ(python_csv_row({"step", "lr"}), "step,lr\r\n");
  EXPECT_EQ(python_csv_row({"a,b", "say \"hi\"", "x\ny", "p\rq"}), "\"a,b\",\"say \"\"hi\"\"\",\"x\ny\",\"p\rq\"\r\n");
  EXPECT_EQ(python_csv_row({""}), "\"\"\r\n");
  EXPECT_EQ(python_csv_row({"", ""}), ",\r\n");
  EXPECT_EQ(csv_file_name("Train/Samples/train loss"), "Train_Samples_train_loss.csv");
}

TEST(Csv, FilesAsDeepSpeedWritesThem) {
  TempDir tmp;
  const std::string dir = tmp.path.string();
  auto row = [](int64_t step, const std::string& value) { return std::to_string(step) + "," + value + "\r\n"; };
  {
    CsvMonitor csv(dir);
    csv.write("Train/Samples/train_loss", 10.987654321, 0);
    csv.write("Train/Samples/loss_scale", 65536, 8, /*as_int=*/true);
    csv.write("Train/Samples/train_loss", 9.5, 8);
    csv.write("Train/Samples/loss_scale", 32768.0, 16);
    csv.write("plain", 1e-5, 16);
    // Each row is in the file as soon as write returns.
    EXPECT_EQ(read_file(tmp.path / "plain.csv"), "step,plain\r\n" + row(16, reference_repr(1e-5)));
    csv.close();
  }
  const std::string loss = "step,train_loss\r\n" + row(0, reference_repr(10.987654321)) + row(8, reference_repr(9.5));
  const std::string scale = "step,loss_scale\r\n" + row(8, "65536") + row(16, reference_repr(32768.0));
  EXPECT_EQ(read_file(tmp.path / "Train_Samples_train_loss.csv"), loss);
  EXPECT_EQ(read_file(tmp.path / "Train_Samples_loss_scale.csv"), scale);
  // A resumed run appends, with a header row of its own before its first row in each file.
  {
    CsvMonitor csv(dir);
    csv.write("Train/Samples/train_loss", 0.125, 16);
    csv.close();
  }
  EXPECT_EQ(read_file(tmp.path / "Train_Samples_train_loss.csv"),
            loss + "step,train_loss\r\n" + row(16, reference_repr(0.125)));
}

TEST(Monitor, LogDirIsPythonsPathJoin) {
  auto dir = [](const std::string& out, const std::string& job) {
    MonitorConfig c;
    c.output_path = out;
    c.job_name = job;
    return monitor_log_dir(c);
  };
  EXPECT_EQ(dir("", "DeepSpeedJobName"), "DeepSpeedJobName");
  EXPECT_EQ(dir("out", "job"), "out/job");
  EXPECT_EQ(dir("out/", "job"), "out/job");
  EXPECT_EQ(dir("out", "/abs/job"), "/abs/job");
  EXPECT_EQ(dir("out", ""), "out/");
}

TEST(Monitor, MasterWritesBothAndFlushes) {
  TempDir tmp;
  MonitorConfig tb, csv;
  tb.enabled = csv.enabled = true;
  tb.output_path = (tmp.path / "tb/nested").string();  // parents are created too
  tb.job_name = "run1";
  csv.output_path = (tmp.path / "csv").string() + "/";
  csv.job_name = "run1";
  MonitorMaster monitor(tb, csv, true);
  EXPECT_TRUE(monitor.enabled());
  EXPECT_EQ(monitor.tensorboard_log_dir(), (tmp.path / "tb/nested/run1").string());
  EXPECT_EQ(monitor.csv_log_dir(), (tmp.path / "csv/run1").string());
  const fs::path event_file = monitor.event_file_path();
  EXPECT_EQ(event_file.parent_path(), tmp.path / "tb/nested/run1");
  EXPECT_EQ(event_file.filename().string().rfind("events.out.tfevents.", 0), 0u);
  EXPECT_EQ(read_records(read_file(event_file)).size(), 1u);  // written at construction

  monitor.write_events({{kMonitorTrainLoss, 3.5, 0}});
  monitor.write_events({{kMonitorLr, 0.001, 8}, {kMonitorLossScale, 65536, 8, true}});
  // Everything is in the files before close.
  const std::vector<tensorboard::Event> events = read_records(read_file(event_file));
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[2].summary().value(0).tag(), kMonitorLr);
  EXPECT_EQ(events[2].step(), 8);
  EXPECT_EQ(events[2].summary().value(0).simple_value(), 0.001f);
  EXPECT_EQ(read_file(tmp.path / "csv/run1/Train_Samples_lr.csv"), "step,lr\r\n8,0.001\r\n");
  EXPECT_EQ(read_file(tmp.path / "csv/run1/Train_Samples_loss_scale.csv"), "step,loss_scale\r\n8,65536\r\n");
  EXPECT_EQ(read_file(tmp.path / "csv/run1/Train_Samples_train_loss.csv"), "step,train_loss\r\n0,3.5\r\n");
  monitor.close();
  std::vector<fs::path> csvs;
  for (const auto& entry : fs::directory_iterator(tmp.path / "csv/run1")) csvs.push_back(entry.path());
  EXPECT_EQ(csvs.size(), 3u);
}

TEST(Monitor, OtherRanksTouchNothing) {
  TempDir tmp;
  MonitorConfig tb, csv;
  tb.enabled = true;
  tb.output_path = (tmp.path / "tb").string();
  MonitorMaster monitor(tb, csv, false);
  EXPECT_TRUE(monitor.enabled());  // the same answer on every rank
  monitor.write_events({{kMonitorLr, 0.5, 8}});
  monitor.close();
  EXPECT_FALSE(fs::exists(tmp.path / "tb"));
  EXPECT_EQ(monitor.event_file_path(), "");
  EXPECT_FALSE(MonitorMaster(MonitorConfig{}, MonitorConfig{}, true).enabled());
}

TEST(Monitor, FailuresNameTheFile) {
  // A full disk: the event file's first record cannot be written.
  std::string err = error_of([] { EventFileWriter::at_path("/dev/full"); });
  EXPECT_NE(err.find("/dev/full"), std::string::npos) << err;
  EXPECT_NE(err.find(std::strerror(ENOSPC)), std::string::npos) << err;

  // A full disk under a CSV: its row cannot be written.
  TempDir tmp;
  const fs::path csv_path = tmp.path / "Train_Samples_lr.csv";
  fs::create_symlink("/dev/full", csv_path);
  CsvMonitor csv(tmp.path.string());
  err = error_of([&] { csv.write(kMonitorLr, 0.5, 8); });
  EXPECT_NE(err.find(csv_path.string()), std::string::npos) << err;
  EXPECT_NE(err.find(std::strerror(ENOSPC)), std::string::npos) << err;

  // A log directory that cannot be created (a file stands where a parent should be); as root,
  // permissions would not stop us, so this is the failure every user can meet.
  std::ofstream(tmp.path / "file") << "x";
  MonitorConfig tb;
  tb.enabled = true;
  tb.output_path = (tmp.path / "file").string();
  tb.job_name = "job";
  err = error_of([&] { MonitorMaster(tb, MonitorConfig{}, true); });
  EXPECT_NE(err.find((tmp.path / "file/job").string()), std::string::npos) << err;
  EXPECT_NE(err.find(std::strerror(ENOTDIR)), std::string::npos) << err;
  EXPECT_THROW(MonitorMaster(tb, MonitorConfig{}, true), UsageError);

  // An event file that cannot be created in an existing directory (a directory in its place).
  err = error_of([&] { EventFileWriter::at_path(tmp.path.string()); });
  EXPECT_NE(err.find(tmp.path.string()), std::string::npos) << err;
  EXPECT_NE(err.find(std::strerror(EISDIR)), std::string::npos) << err;
}

