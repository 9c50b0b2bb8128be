#pragma once

#include <telemetry.h>

#include <QByteArray>
#include <QList>
#include <QString>

namespace dlion::core {

// Packs one worker's consecutive round records into a compact blob for the
// run store, and back.
//
// Layout (before zlib): magic "R1", record count, then one column per field:
// round number, time (microseconds) and the integer fields as zig-zag varint
// deltas; the parameter digest as raw 8 bytes (omitted when all zero); the
// per-link vector lengths; then every real-valued field (share, rate,
// compute/comm seconds, loss, slowdown, per-link Mbps and fraction sent) as
// float32, XOR-ed with the previous value of the same series and split into
// byte planes so slowly changing series compress to almost nothing.
//
// Precision contract: integers are exact, `t` is kept to 1 microsecond, real
// values to float32 (about 7 significant digits), per-link Mbps and fraction
// to 16 significant bits (relative error < 2e-5). A value exactly
// representable at that precision (e.g. 0.5, 800, 1234.25) reads back
// identically.
namespace roundseries {

QByteArray encode(const QList<protocol::RoundRecord> &rounds, qsizetype from, qsizetype to);
// Appends the decoded records (with `worker` set) to `out`; false and a
// message on a malformed blob.
bool decode(const QByteArray &blob, int worker, QList<protocol::RoundRecord> *out, QString *error);

} // namespace roundseries
} // namespace dlion::core
