#pragma once

// Synthetic telemetry shared by tst_run_store and its store_writer helper.
#include <telemetry.h>

namespace dlion::test {

// Round i of worker w, with values a test can recompute (all exact in float32).
inline protocol::RoundRecord syntheticRound(int w, qint64 i)
{
    protocol::RoundRecord r;
    r.worker = w;
    r.round = i;
    r.t = double(i) / 64.0;
    r.batch = 32 + w;
    r.share = 0.5;
    r.rate = 1000.0 + double(i % 97) * 0.25;
    r.computeS = 0.015625;
    r.commS = 0.0078125 * double(1 + i % 3);
    r.loss = 2.0 - double(i % 512) / 512.0;
    r.bytesSent = 4000 + i;
    r.linkMbps = {0.0, 800.0 - double(i % 8)};
    r.linkFraction = {0.0, 0.5};
    return r;
}

} // namespace dlion::test
