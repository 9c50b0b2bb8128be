#include "link_emulator.h"

#include "engine_error.h"

#include <link_presets.h>

#include <QJsonArray>

#include <algorithm>
#include <atomic>
#include <cmath>

namespace dlion::engine {

namespace {

QList<double> presetRates(const QString &name)
{
    const QList<double> rates = protocol::linkPresetRates(name);
    if (!rates.isEmpty())
        return rates;
    throw EngineError("field \"emulation.links\" is \"" + name.toStdString()
                      + "\"; use lan, lan-hetero, wan, wan-hetero, none or an N x N matrix of Mbit/s");
}

double positive(const QJsonValue &v, const char *field, bool zeroAllowed = false)
{
    const double d = v.toDouble(-1);
    if (!v.isDouble() || !std::isfinite(d) || d < 0 || (d == 0 && !zeroAllowed))
        throw EngineError(std::string("field \"") + field + "\" must be a positive number"
                          + (zeroAllowed ? " (0 = uncapped)" : ""));
    return d;
}

std::atomic<std::int64_t> g_unpacedCapReads{0};
thread_local int t_pacerDepth = 0;

} // namespace

LinkEmulator::PacerScope::PacerScope() { ++t_pacerDepth; }
LinkEmulator::PacerScope::~PacerScope() { --t_pacerDepth; }
std::int64_t LinkEmulator::capReadsOutsidePacer() { return g_unpacedCapReads; }

LinkEmulator::LinkEmulator(const QJsonObject &emulation, int world)
    : m_world(world), m_caps(std::size_t(world * world), kUncapped), m_overrides(std::size_t(world * world), -1)
{
    const QJsonValue links = emulation.value("links");
    if (links.isString() || links.isUndefined()) {
        const QString preset = links.isUndefined() ? QStringLiteral("none") : links.toString();
        const QList<double> rates = presetRates(preset);
        m_latencyS = protocol::linkPresetLatencyMs(preset) / 1000.0;
        for (int i = 0; i < world; ++i) {
            for (int j = 0; j < world; ++j)
                m_caps[std::size_t(i * world + j)] = protocol::linkPresetCap(rates, i, j);
        }
    } else if (links.isArray()) {
        const QJsonArray rows = links.toArray();
        if (rows.size() != world)
            throw EngineError("field \"emulation.links\" has " + std::to_string(rows.size()) + " rows for "
                              + std::to_string(world) + " workers");
        for (int i = 0; i < world; ++i) {
            const QJsonArray row = rows[i].toArray();
            if (row.size() != world)
                throw EngineError("field \"emulation.links\" row " + std::to_string(i) + " must have "
                                  + std::to_string(world) + " entries");
            for (int j = 0; j < world; ++j) {
                if (i != j)
                    m_caps[std::size_t(i * world + j)] = positive(row[j], "emulation.links", true);
            }
        }
    } else {
        throw EngineError("field \"emulation.links\" must be a preset name or an N x N matrix");
    }
    if (emulation.contains("latency_ms"))
        m_latencyS = emulation.value("latency_ms").toDouble(-1) / 1000.0;
    if (m_latencyS < 0 || m_latencyS > 10)
        throw EngineError("field \"emulation.latency_ms\" must be between 0 and 10000");

    for (const QJsonValue &v : emulation.value("schedule").toArray()) {
        const QJsonObject o = v.toObject();
        Event e;
        e.atS = o.value("at_s").toDouble(-1);
        if (e.atS < 0)
            throw EngineError("field \"emulation.schedule[].at_s\" must be a time in seconds >= 0");
        if (o.contains("link")) {
            const QJsonArray l = o.value("link").toArray();
            e.from = l.size() == 2 ? l[0].toInt(-1) : -1;
            e.to = l.size() == 2 ? l[1].toInt(-1) : -1;
            if (e.from < 0 || e.to < 0 || e.from >= world || e.to >= world || e.from == e.to)
                throw EngineError("field \"emulation.schedule[].link\" must be [I, J] with two different workers");
            e.mbps = positive(o.value("mbps"), "emulation.schedule[].mbps");
        } else if (o.contains("worker")) {
            e.worker = o.value("worker").toInt(-1);
            if (e.worker < 0 || e.worker >= world)
                throw EngineError("field \"emulation.schedule[].worker\" is not a worker index");
            e.slowdown = o.value("slowdown").toDouble(0);
            if (!(e.slowdown >= 1))
                throw EngineError("field \"emulation.schedule[].slowdown\" must be a factor >= 1");
        } else {
            throw EngineError("each \"emulation.schedule\" event needs \"link\" and \"mbps\", or \"worker\" and \"slowdown\"");
        }
        m_schedule.push_back(e);
    }
    std::stable_sort(m_schedule.begin(), m_schedule.end(), [](const Event &a, const Event &b) { return a.atS < b.atS; });
}

bool LinkEmulator::capped() const
{
    std::lock_guard lock(m_mutex);
    return std::any_of(m_caps.begin(), m_caps.end(), [](double c) { return c > 0; })
        || std::any_of(m_overrides.begin(), m_overrides.end(), [](double c) { return c > 0; })
        || std::any_of(m_schedule.begin(), m_schedule.end(), [](const Event &e) { return e.from >= 0; });
}

void LinkEmulator::setGroup(std::vector<int> members)
{
    std::lock_guard lock(m_mutex);
    m_members = std::move(members);
}

double LinkEmulator::capMbps(int from, int to, double t) const
{
    if (from == to)
        return kUncapped;
    if (t_pacerDepth == 0)
        ++g_unpacedCapReads;
    std::lock_guard lock(m_mutex);
    if (!m_members.empty()) {
        from = m_members.at(std::size_t(from));
        to = m_members.at(std::size_t(to));
    }
    const std::size_t k = std::size_t(from * m_world + to);
    if (m_overrides[k] >= 0)
        return m_overrides[k];
    double cap = m_caps[k];
    for (const Event &e : m_schedule) {
        if (e.atS > t)
            break;
        if (e.from == from && e.to == to)
            cap = e.mbps;
    }
    return cap;
}

double LinkEmulator::transferSeconds(int from, int to, double bytes, double t) const
{
    if (from == to)
        return 0;
    const double cap = capMbps(from, to, t);
    return m_latencyS + (cap > 0 ? bytes * kWireOverhead * 8.0 / (cap * 1e6) : 0.0);
}

double LinkEmulator::allreduceSeconds(double bytes, double t) const
{
    const int n = groupSize();
    double step = 0;
    for (int i = 0; i < n && n > 1; ++i)
        step = std::max(step, transferSeconds(i, (i + 1) % n, bytes / n, t));
    return 2.0 * (n - 1) * step;
}

double LinkEmulator::broadcastSeconds(int root, const std::vector<int> &receivers, double bytes, double t) const
{
    double seconds = 0;
    for (int j = 0; j < groupSize(); ++j) {
        if (receivers.empty() || std::find(receivers.begin(), receivers.end(), j) != receivers.end())
            seconds = std::max(seconds, transferSeconds(root, j, bytes, t));
    }
    return seconds;
}

int LinkEmulator::groupSize() const
{
    std::lock_guard lock(m_mutex);
    return m_members.empty() ? m_world : int(m_members.size());
}

void LinkEmulator::setCap(int from, int to, double mbps)
{
    if (from < 0 || to < 0 || from >= m_world || to >= m_world || from == to)
        return;
    std::lock_guard lock(m_mutex);
    m_overrides[std::size_t(from * m_world + to)] = std::max(0.0, mbps);
}

bool LinkEmulator::scheduledSlowdown(int worker, double since, double t, double *factor) const
{
    bool found = false;
    for (const Event &e : m_schedule) {
        if (e.worker == worker && e.atS > since && e.atS <= t) {
            *factor = e.slowdown;
            found = true;
        }
    }
    return found;
}

} // namespace dlion::engine
