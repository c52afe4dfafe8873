#pragma once
// The live status page's HTML: a fixed document whose inline script fetches status.json every
// 2 s and draws the job, the curves (inline SVG), the workers, staleness and membership events
// itself. Self-contained: no external script, style or font (the machines may have no internet).
namespace accord {

extern const char* const status_page_html;

}  // namespace accord
