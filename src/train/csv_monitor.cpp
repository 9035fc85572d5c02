#include "train/csv_monitor.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "train/checked_file.h"

namespace zt {

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  // The shortest round-trip digits, from to_chars' scientific form "d[.ddd]e±XX".
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), std::fabs(value), std::chars_format::scientific);
  ZT_CHECK(ec == std::errc(), "to_chars failed");
  const std::string text(buf, end);
  const size_t e = text.find('e');
  std::string digits = text.substr(0, e);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  const int exponent = std::atoi(text.c_str() + e + 1);
  // Python's rule (float_repr_style "short", repr mode 'r'): with the value 0.DIGITS x 10^decpt,
  // positional when -4 < decpt <= 16, else exponent form.
  const int decpt = exponent + 1;
  const int ndigits = int(digits.size());
  std::string out = std::signbit(value) ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {  // 0.000ddd
      out.append("0.").append(size_t(-decpt), '0').append(digits);
    } else if (decpt >= ndigits) {  // ddd000.0
      out.append(digits).append(size_t(decpt - ndigits), '0').append(".0");
    } else {  // dd.ddd
      out.append(digits, 0, size_t(decpt)).append(".").append(digits, size_t(decpt));
    }
  } else {  // d.ddde-XX
    out.append(digits, 0, 1);
    if (ndigits > 1) out.append(".").append(digits, 1);
    const int shown = decpt - 1;
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", shown < 0 ? '-' : '+', std::abs(shown));
    out.append(exp);
  }
  return out;
}

std::string python_csv_row(const std::vector<std::string>& fields) {
  std::string row;
  for (size_t i = 0; i < fields.size(); ++i) {
    const std::string& f = fields[i];
    if (i > 0) row += ',';
    // A row of one empty field is written as "" so that it reads back as a field, not as nothing.
    const bool quote = f.find_first_of(",\"\r\n") != std::string::npos || (fields.size() == 1 && f.empty());
    if (!quote) {
      row += f;
      continue;
    }
    row += '"';
    for (char c : f) {
      if (c == '"') row += '"';
      row += c;
    }
    row += '"';
  }
  row += "\r\n";
  return row;
}

std::string csv_file_name(const std::string& tag) {
  std::string name = tag;
  for (char& c : name) {
    if (c == '/' || c == ' ') c = '_';
  }
  return name + ".csv";
}

CsvMonitor::CsvMonitor(std::string log_dir) : log_dir_(std::move(log_dir)) {}

CsvMonitor::~CsvMonitor() = default;

void CsvMonitor::write(const std::string& tag, double value, int64_t step, bool as_int) {
  const std::string name = csv_file_name(tag);
  auto it = files_.find(name);
  std::string text;
  if (it == files_.end()) {
    // DeepSpeed joins log_dir + '/' + name; an "a+" open creates or appends.
    it = files_.emplace(name, std::make_unique<CheckedFile>(log_dir_ + "/" + name, CheckedFile::Mode::kAppend)).first;
    // The header names the value by the tag's last '/' component.
    const size_t slash = tag.rfind('/');
    text += python_csv_row({"step", slash == std::string::npos ? tag : tag.substr(slash + 1)});
  }
  char int_text[32];
  if (as_int) std::snprintf(int_text, sizeof(int_text), "%.0f", value + 0.0);  // + 0.0: no "-0", as Python's int
  text += python_csv_row({std::to_string(step), as_int ? std::string(int_text) : python_float_repr(value)});
  it->second->write(text);
}

void CsvMonitor::close() {
  for (auto& [name, file] : files_) file->close();
}

}  // namespace zt
