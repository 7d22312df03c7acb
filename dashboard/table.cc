#include "dashboard/table.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>
#include <stdexcept>

#include "dashboard/figures.h"

namespace hippo::dashboard {
namespace {

// A value for the table: numbers to `digits` significant digits (the table shows 4: parameters,
// which people chose, to those 4, metrics to 6 so that sorting by them seldom ties; full doubles
// would make a large study's table a third heavier), non-finite ones as empty cells.
nlohmann::json cell_value(const nlohmann::json& v, int digits = 6) {
  if (!v.is_number_float()) return v;
  double d = v.get<double>();
  if (!std::isfinite(d)) return nullptr;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*g", digits, d);
  return std::strtod(buf, nullptr);
}

// A cell as the filter's words see it: integers whole, other numbers to 4 digits (as shown).
std::string cell_text(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d == std::floor(d) && std::abs(d) < 1e15) return std::to_string(static_cast<int64_t>(d));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", d);
    return buf;
  }
  return v.dump();
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Empty cells last either way, numbers before text, numbers by value, text by bytes.
int compare_cells(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_null() || b.is_null()) return a.is_null() == b.is_null() ? 0 : a.is_null() ? 1 : -1;
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_number() != b.is_number()) return a.is_number() ? -1 : 1;
  return cell_text(a).compare(cell_text(b));
}

using Test = std::function<bool(const std::vector<nlohmann::json>&)>;

std::vector<Test> parse_filter(const TrialTable& table, const std::string& text) {
  std::vector<Test> tests;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find_first_of(" \t", at);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(at, end - at);
    at = end + 1;
    if (word.empty()) continue;
    // COLUMN OP VALUE: the first operator after a column's name.
    std::optional<Test> test;
    for (size_t op_at = 1; op_at < word.size() && !test; ++op_at) {
      static const char* const ops[] = {"<=", ">=", "!=", "=", "<", ">"};
      for (const char* op : ops) {
        const std::string o = op;
        if (word.compare(op_at, o.size(), o) != 0 || op_at + o.size() >= word.size()) continue;
        auto column = std::find(table.columns.begin(), table.columns.end(), word.substr(0, op_at));
        if (column == table.columns.end()) break;
        const size_t c = static_cast<size_t>(column - table.columns.begin());
        const std::string want = word.substr(op_at + o.size());
        char* number_end = nullptr;
        const double number = std::strtod(want.c_str(), &number_end);
        const bool numeric = number_end && *number_end == '\0';
        test = [c, o, want, number, numeric](const std::vector<nlohmann::json>& row) {
          const nlohmann::json& v = row[c];
          int cmp;
          if (numeric && v.is_number()) {
            const double x = v.get<double>();
            cmp = x < number ? -1 : x > number ? 1 : 0;
          } else {
            cmp = cell_text(v).compare(want);
          }
          if (o == "=") return cmp == 0;
          if (o == "!=") return cmp != 0;
          if (o == "<") return cmp < 0;
          if (o == "<=") return cmp <= 0;
          if (o == ">") return cmp > 0;
          return cmp >= 0;
        };
        break;
      }
    }
    if (!test) {
      const std::string w = lower(word);
      test = [w](const std::vector<nlohmann::json>& row) {
        return std::any_of(row.begin(), row.end(), [&](const nlohmann::json& v) {
          return lower(cell_text(v)).find(w) != std::string::npos;
        });
      };
    }
    tests.push_back(std::move(*test));
  }
  return tests;
}

}  // namespace

TrialTable trial_table(const StudyView& s) {
  return trial_table(s, param_columns(s));
}

TrialTable trial_table(const StudyView& s, const std::vector<ParamColumn>& params) {
  TrialTable table;
  std::set<std::string> metric_names;
  for (const TrialView& t : s.trials)
    for (const auto& [k, v] : t.last) metric_names.insert(k);
  table.columns = {"trial", "status", "end reason", "steps"};
  for (const ParamColumn& p : params) table.columns.push_back(p.name);
  table.columns.push_back("best " + s.metric);
  table.default_sort = table.columns.size() - 1;
  table.default_descending = s.maximize;
  // With several objectives or constraints: each objective at the trial's result, and where the
  // result stands (the front first).
  const bool results = s.goals.multi();
  if (results) {
    for (const Objective& o : s.goals.objectives) table.columns.push_back(o.metric);
    table.columns.push_back("feasible");
    table.columns.push_back("pareto");
    if (s.goals.several()) {
      table.default_sort = table.columns.size() - 1;
      table.default_descending = true;  // "yes" before "no"
    }
  }
  for (const std::string& m : metric_names) table.columns.push_back("last " + m);
  table.rows.reserve(s.trials.size());
  for (size_t i = 0; i < s.trials.size(); ++i) {
    const TrialView& t = s.trials[i];
    std::vector<nlohmann::json> row = {t.row.number, to_string(t.row.status), t.row.end_reason,
                                       t.needed};
    row.reserve(table.columns.size());
    for (const ParamColumn& p : params)
      row.push_back(p.values[i] ? cell_value(*p.values[i], 4) : nlohmann::json());
    row.push_back(t.best ? cell_value(*t.best) : nlohmann::json());
    if (results) {
      for (size_t i = 0; i < s.goals.objectives.size(); ++i)
        row.push_back(t.result ? cell_value(t.result->values[i]) : nlohmann::json());
      row.push_back(t.result ? nlohmann::json(t.result->feasible ? "yes" : "no")
                             : nlohmann::json());
      row.push_back(t.result ? nlohmann::json(t.result->pareto_optimal ? "yes" : "no")
                             : nlohmann::json());
    }
    for (const std::string& m : metric_names) {
      auto it = t.last.find(m);
      row.push_back(it == t.last.end() ? nlohmann::json() : cell_value(it->second));
    }
    table.rows.push_back(std::move(row));
  }
  return table;
}

TableQuery default_query(const TrialTable& table) {
  TableQuery q;
  q.sort = table.default_sort;
  q.descending = table.default_descending;
  return q;
}

nlohmann::json table_page(const TrialTable& table, const TableQuery& query) {
  if (query.sort >= table.columns.size())
    throw std::invalid_argument("no column " + std::to_string(query.sort) + " in the trial table");
  const std::vector<Test> tests = parse_filter(table, query.filter);
  std::vector<size_t> shown;
  for (size_t i = 0; i < table.rows.size(); ++i)
    if (std::all_of(tests.begin(), tests.end(), [&](const Test& t) { return t(table.rows[i]); }))
      shown.push_back(i);
  // Ties by trial number, whichever way: a total order, stable for paging.
  auto before = [&](size_t a, size_t b) {
    const nlohmann::json &x = table.rows[a][query.sort], &y = table.rows[b][query.sort];
    int c = compare_cells(x, y);
    if (query.descending && !x.is_null() && !y.is_null()) c = -c;
    return c != 0 ? c < 0 : a < b;
  };
  const size_t pages = std::max<size_t>(1, (shown.size() + kTablePage - 1) / kTablePage);
  size_t page = std::min(query.page, pages - 1);
  // Only the rows up to the page asked for need their order (the order is total, so they are
  // the same rows as a whole sort's); a trial asked for needs them all.
  const size_t ordered =
      query.trial ? shown.size() : std::min(shown.size(), (page + 1) * kTablePage);
  const auto end = shown.begin() + static_cast<std::ptrdiff_t>(ordered);
  if (end != shown.end()) std::nth_element(shown.begin(), end, shown.end(), before);
  std::sort(shown.begin(), end, before);
  nlohmann::json found = nullptr;
  if (query.trial) {
    for (size_t i = 0; i < shown.size(); ++i)
      if (table.rows[shown[i]][0] == *query.trial) {
        page = i / kTablePage;
        found = *query.trial;
      }
  }
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = page * kTablePage; i < shown.size() && i < (page + 1) * kTablePage; ++i)
    rows.push_back(table.rows[shown[i]]);
  return {{"columns", table.columns},
          {"rows", std::move(rows)},
          {"total", table.rows.size()},
          {"shown", shown.size()},
          {"page", page},
          {"pages", pages},
          {"sort", query.sort},
          {"descending", query.descending},
          {"filter", query.filter},
          {"trial", found}};
}

std::string compressed_table(const TrialTable& table) {
  nlohmann::json data = nlohmann::json::array();
  for (size_t c = 1; c < table.columns.size(); ++c) {
    nlohmann::json column = nlohmann::json::array();
    for (const auto& row : table.rows) column.push_back(row[c]);
    data.push_back(std::move(column));
  }
  const nlohmann::json whole = {{"columns", table.columns}, {"data", std::move(data)}};
  return base64(gzip(whole.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
}

std::string gzip(const std::string& bytes) {
  z_stream z{};
  // 15 + 16: a gzip header and trailer, which DecompressionStream("gzip") and browsers read.
  if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("zlib: deflateInit2 failed");
  std::string out(deflateBound(&z, bytes.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int status = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (status != Z_STREAM_END) throw std::runtime_error("zlib: deflate failed");
  return out;
}

std::string base64(const std::string& bytes) {
  static const char* const digits =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 2]);
    out += digits[(n >> 18) & 63];
    out += digits[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? digits[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? digits[n & 63] : '=';
  }
  return out;
}

}  // namespace hippo::dashboard
