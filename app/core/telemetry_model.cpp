#include "telemetry_model.h"

#include "run_data.h"

#include <algorithm>

namespace dlion::core {

TelemetryModel::TelemetryModel(qsizetype capacityPerSeries, qsizetype mergeCapacity)
    : m_capacity(capacityPerSeries), m_mergeCapacity(mergeCapacity), m_best(capacityPerSeries),
      m_global(capacityPerSeries), m_mergeSeries(mergeCapacity)
{
}

void TelemetryModel::reset(int workers)
{
    m_workers = qMax(0, workers);
    m_series.assign(std::size_t(kMetrics * m_workers), BoundedSeries(m_capacity));
    m_best.clear();
    m_global.clear();
    m_mergeSeries.clear();
    m_last.assign(std::size_t(m_workers), protocol::RoundRecord());
    m_hasLast.assign(std::size_t(m_workers), false);
    m_accuracy.assign(std::size_t(m_workers), -1);
    m_merges.clear();
    m_mergeCount = 0;
    m_roundCount = 0;
    m_seenRounds.assign(std::size_t(m_workers), 0);
    m_seenEvals = 0;
    m_seenMerges = 0;
    m_dataId = 0;
    ++m_epoch;
    ++m_revision;
}

const BoundedSeries &TelemetryModel::series(Metric metric, int worker) const
{
    return m_series[std::size_t(int(metric) * m_workers + worker)];
}

void TelemetryModel::append(const protocol::TelemetryBatch &batch)
{
    for (const auto &r : batch.rounds)
        addRound(r);
    for (const auto &e : batch.evals)
        addEval(e);
    for (const auto &m : batch.merges)
        addMerge(m);
    if (!batch.isEmpty())
        ++m_revision;
}

void TelemetryModel::catchUp(const RunData &data)
{
    if (data.workers() != m_workers || data.resetId() != m_dataId) {
        reset(data.workers());
        m_dataId = data.resetId();
    }
    protocol::TelemetryBatch fresh;
    for (int w = 0; w < m_workers; ++w) {
        const auto &rounds = data.rounds(w);
        for (qsizetype i = m_seenRounds[std::size_t(w)]; i < rounds.size(); ++i)
            fresh.rounds.append(rounds[i]);
        m_seenRounds[std::size_t(w)] = rounds.size();
    }
    fresh.evals = data.evals().mid(m_seenEvals);
    m_seenEvals = data.evals().size();
    fresh.merges = data.merges().mid(m_seenMerges);
    m_seenMerges = data.merges().size();
    append(fresh);
}

void TelemetryModel::addRound(const protocol::RoundRecord &r)
{
    if (r.worker < 0 || r.worker >= m_workers)
        return;
    const auto w = std::size_t(r.worker);
    m_series[std::size_t(int(Metric::Share) * m_workers) + w].append(r.t, 100.0 * r.share);
    m_series[std::size_t(int(Metric::Rate) * m_workers) + w].append(r.t, r.rate);
    m_series[std::size_t(int(Metric::Loss) * m_workers) + w].append(r.t, r.loss);
    double sent = 0;
    int peers = 0;
    for (std::size_t j = 0; j < r.linkFraction.size(); ++j) {
        if (int(j) != r.worker) {
            sent += r.linkFraction[j];
            ++peers;
        }
    }
    if (peers > 0)
        m_series[std::size_t(int(Metric::FractionSent) * m_workers) + w].append(r.t, 100.0 * sent / peers);
    m_last[w] = r;
    m_hasLast[w] = true;
    ++m_roundCount;
}

void TelemetryModel::addEval(const protocol::EvalRecord &e)
{
    if (e.worker < 0 || e.worker >= m_workers)
        return;
    m_series[std::size_t(int(Metric::Accuracy) * m_workers + e.worker)].append(e.t, 100.0 * e.accuracy);
    m_accuracy[std::size_t(e.worker)] = e.accuracy;
    m_best.append(e.t, 100.0 * *std::max_element(m_accuracy.begin(), m_accuracy.end()));
    if (e.primary)
        m_global.append(e.t, 100.0 * e.globalAccuracy);
}

void TelemetryModel::addMerge(const protocol::MergeEvent &m)
{
    m_merges.append(m);
    if (m_merges.size() > m_mergeCapacity)
        m_merges.remove(0, m_merges.size() - m_mergeCapacity);
    m_mergeSeries.append(m.t, 100.0 * m.scoreFrom);
    ++m_mergeCount;
}

const protocol::RoundRecord *TelemetryModel::lastRound(int worker) const
{
    if (worker < 0 || worker >= m_workers || !m_hasLast[std::size_t(worker)])
        return nullptr;
    return &m_last[std::size_t(worker)];
}

double TelemetryModel::linkMbps(int from, int to) const
{
    const auto *r = lastRound(from);
    return r && to >= 0 && std::size_t(to) < r->linkMbps.size() ? r->linkMbps[std::size_t(to)] : 0;
}

double TelemetryModel::linkFraction(int from, int to) const
{
    const auto *r = lastRound(from);
    return r && to >= 0 && std::size_t(to) < r->linkFraction.size() ? r->linkFraction[std::size_t(to)] : 0;
}

} // namespace dlion::core
