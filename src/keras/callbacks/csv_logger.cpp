#include "lockstep/keras/callbacks/csv_logger.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>

#include "lockstep/core/check.h"
#include "lockstep/core/error.h"

namespace lockstep::keras::callbacks {

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-d.ddde+XX", the shortest round-trip digits
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e_pos = sci.find('e');
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string digits = sci.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int decpt = exponent + 1;  // digits before the decimal point
  const int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    std::string mant = digits.substr(0, 1);
    if (n > 1) mant += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return sign + mant + e;
  }
  if (decpt <= 0) return sign + "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  if (decpt >= n) return sign + digits + std::string(static_cast<size_t>(decpt - n), '0') + ".0";
  return sign + digits.substr(0, static_cast<size_t>(decpt)) + "." +
         digits.substr(static_cast<size_t>(decpt));
}

CSVLogger::CSVLogger(std::string filename, char separator, bool append)
    : filename_(std::move(filename)), separator_(separator), append_(append) {}

void CSVLogger::on_train_begin(const Logs&) {
  write_header_ = true;
  if (append_) {
    std::error_code ec;
    if (std::filesystem::exists(filename_, ec) && std::filesystem::file_size(filename_, ec) > 0) {
      write_header_ = false;
    }
  }
  keys_.clear();
  file_.open(filename_, append_ ? std::ios::app : std::ios::trunc);
  LOCKSTEP_CHECK_AS(NotFound, file_, "CSVLogger: cannot open '", filename_, "' for writing.");
}

void CSVLogger::on_epoch_end(int epoch, const Logs& logs) {
  if (keys_.empty()) {
    for (const auto& [k, v] : logs) keys_.push_back(k);
  }
  if (write_header_) {
    file_ << "epoch";
    for (const auto& k : keys_) file_ << separator_ << k;
    file_ << "\n";
    write_header_ = false;
  }
  file_ << epoch;
  for (const auto& k : keys_) {
    auto it = logs.find(k);
    file_ << separator_ << (it == logs.end() ? std::string("NA") : python_float_repr(it->second));
  }
  file_ << "\n";
  file_.flush();
}

void CSVLogger::on_train_end(const Logs&) {
  file_.close();
}

}  // namespace lockstep::keras::callbacks
