// The trial table of a study, for any number of trials: its cells (what pages.cc showed as
// JSON), a page of it sorted and filtered on the server (the dashboard's
// /study/ID/trials?sort=&desc=&filter=&page=&trial=), and the whole table compressed for the
// report (gzip, then base64, of its columns; dashboard.js decodes it with the browser's
// DecompressionStream and pages it offline).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dashboard/model.h"
#include "dashboard/summary.h"

namespace hippo::dashboard {

constexpr size_t kTablePage = 50;

struct TrialTable {
  std::vector<std::string> columns;  // "trial", "status", ..., each parameter, "best METRIC", ...
  std::vector<std::vector<nlohmann::json>> rows;  // by trial number; parameters to 4 digits,
                                                  // metrics to 6
  size_t default_sort = 0;  // the column a page is sorted by at first: the goal's
  bool default_descending = false;
};
TrialTable trial_table(const StudyView& study);
// The same with the study's parameter columns (param_columns) already looked up.
TrialTable trial_table(const StudyView& study, const std::vector<ParamColumn>& params);

struct TableQuery {
  size_t sort = 0;
  bool descending = false;
  // "lr>0.05 status=done adam": words match any cell (case-insensitive, as the cell's text),
  // COLUMN OP VALUE (=, !=, <, <=, >, >=) compares one column, as numbers when both are.
  std::string filter;
  size_t page = 0;
  std::optional<int64_t> trial;  // the page that holds this trial instead, if it is shown
};
// Sorted by the goal, best first; no filter; the first page.
TableQuery default_query(const TrialTable& table);

// {"columns", "rows" (at most kTablePage), "total", "shown" (after the filter), "page", "pages",
// "sort", "descending", "filter", and "trial" (the row asked for, when it was found)}. Throws
// std::invalid_argument for a column that is not there.
nlohmann::json table_page(const TrialTable& table, const TableQuery& query);

// The whole table for the report: base64 of the gzip of {"columns", "data": one array per column
// but the first (the trial numbers are 1, 2, ... in order)}.
std::string compressed_table(const TrialTable& table);

// gzip (zlib, level 6) of bytes; base64 of bytes.
std::string gzip(const std::string& bytes);
std::string base64(const std::string& bytes);

}  // namespace hippo::dashboard
