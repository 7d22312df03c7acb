// The dashboard's HTML: whole pages (figures.h's SVG, the trial table as JSON that
// dashboard.js renders, the style and script inlined) and the one-file report. Nothing here
// refers to anything outside the page: no external script, style, font or image, and the
// Content-Security-Policy says so to the browser.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "dashboard/figures.h"
#include "dashboard/model.h"

namespace hippo::dashboard {

// A page: its title and the inner HTML of its <main>, which the live pages re-fetch alone (the
// "content" part) when the plan changes.
struct Page {
  std::string title;
  std::string content;
};

Page studies_page(const PlanView& plan);
Page compare_page(const std::vector<const StudyView*>& studies);
// `selected`: trials the user picked (?trial=N), drawn one by one in every figure.
Page study_page(const StudyView& study, const std::vector<int64_t>& selected = {});
// `expansion`: how a tree past kMaxStagesDrawn stages is drawn (figures.h); the page links to
// its expansions (?expand=all, ?expand=STAGE) and back.
Page tree_page(const StudyView& study, const std::vector<int64_t>& selected = {},
               const TreeExpansion& expansion = {});
Page timeline_page(const StudyView& study);
Page error_page(int status, const std::string& message);

// Pages are made of parts (a figure, the summary, the table), each named by the hash of its
// content and ended by kPartEnd. A live page polls with the names of the parts it shows; the
// content it gets back has each of those that did not change as an empty placeholder
// (data-kept), which dashboard.js fills with what it has: a running study sends only what
// changed since the last poll.
constexpr const char* kPartEnd = "</div><!--part-->";
std::string without_parts(const std::string& content, const std::set<std::string>& kept);

// The whole document. `live`: the page polls its own URL for a newer content part (the
// dashboard); otherwise it is a static file (the report). `version` is the ETag of the content.
std::string document(const Page& page, bool live, const std::string& version);

// The report: every figure of the study, its stage tree and timeline in one self-contained file.
std::string report(const StudyView& study);

// The Content-Security-Policy of every page: the inlined script and style only (by their
// hashes), images only as data:, requests only to the page's own origin (none for the report).
std::string content_security_policy(bool live);

}  // namespace hippo::dashboard
