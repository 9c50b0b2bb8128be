#pragma once

#include <QList>
#include <QStringList>

namespace dlion::protocol {

// The emulated micro-cloud's link presets (docs/emulation.md), one table for
// the engine, the CLI and the GUI: "lan" 800, "lan-hetero" 800/400/200,
// "wan" 40, "wan-hetero" 40/20/10 Mbit/s, "none" uncapped (0). The link
// between workers i and j gets rates[(i + j) mod size], the same both ways.
const QStringList &linkPresetNames();
// Empty for an unknown name.
QList<double> linkPresetRates(const QString &name);
// One-way latency of every link of a preset (ms): LAN 0.2, WAN 25, none 0.
double linkPresetLatencyMs(const QString &name);
// Cap of link from -> to under `rates`; 0 (uncapped) on the diagonal.
double linkPresetCap(const QList<double> &rates, int from, int to);

} // namespace dlion::protocol
