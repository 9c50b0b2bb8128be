#pragma once

#include <QtGlobal>

namespace dlion::agent {

struct ReleasedPages {
    qint64 bytes = 0;
    int mappings = 0;
};

// Unmaps, from this process only, the resident pages of file mappings that
// are private, read-only and were never written (no copy-on-write page).
// Debian's LibTorch pulls in about 300 libraries (OpenCV, FFmpeg, GDAL...)
// bound at load: the loader reads every symbol table once, and those pages
// would otherwise count in the agent's RSS for its whole life. They stay in
// the page cache; a page needed again comes back by a minor fault. Mappings
// holding a written page (relocated data made read-only) are left alone, as
// dropping them would lose the writes. Call it while no other thread maps,
// unmaps or unprotects memory.
ReleasedPages releaseUnwrittenFilePages();

} // namespace dlion::agent
