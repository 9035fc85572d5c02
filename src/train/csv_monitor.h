// DeepSpeed's csv_monitor: one CSV per tag in the log directory, named after the tag with '/'
// and ' ' replaced by '_' (Train/Samples/lr -> Train_Samples_lr.csv), rows "step,value" written
// as Python's csv module writes them, a header row "step,<last tag component>" before the first
// row this process writes to each file. Files are appended to, so a resumed run adds its rows
// (after a header row of its own) to the previous run's.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zt {

class CheckedFile;

/// Python's repr() of a float (and str(), the same since Python 3): the shortest digits that read
/// back to the same double; positional when the decimal exponent is in [-4, 16), with ".0" when
/// integral; otherwise d.ddde±XX (at least two exponent digits). "nan", "inf", "-inf", "-0.0".
std::string python_float_repr(double value);

/// One row as Python's csv.writer writes it in its default dialect ("excel"): fields joined by
/// ',', a field quoted (with '"' doubled) only when it holds ',', '"', '\r' or '\n', ending "\r\n".
std::string python_csv_row(const std::vector<std::string>& fields);

/// The CSV file name for `tag` (without the directory): '/' and ' ' become '_', plus ".csv".
std::string csv_file_name(const std::string& tag);

class CsvMonitor {
 public:
  /// `log_dir` must exist; files are created there on their first row.
  explicit CsvMonitor(std::string log_dir);
  ~CsvMonitor();
  CsvMonitor(const CsvMonitor&) = delete;
  CsvMonitor& operator=(const CsvMonitor&) = delete;

  /// Appends the row "step,value" to the tag's file (after its header row if this process has
  /// not written that file yet). `as_int` writes the value as Python writes an int ("65536").
  /// The row is in the file when this returns; a failure throws zt::Error naming the file.
  void write(const std::string& tag, double value, int64_t step, bool as_int = false);
  /// Closes every file; throws zt::Error naming a file that fails to close.
  void close();

 private:
  std::string log_dir_;
  std::map<std::string, std::unique_ptr<CheckedFile>> files_;  // by file name
};

}  // namespace zt
