#pragma once
// The live status page's HTML: a fixed document whose inline script fetches status.json every
// 2 s and draws the job, the curves (inline SVG), the workers, staleness and membership events
// itself. Self-contained: no external script, style or font (the machines may have no internet).
#include <string>

namespace accord {

// The page, its tiles those the metrics' declarations name (<accord/metrics_fields.hpp>).
const std::string& status_page_html();

}  // namespace accord
