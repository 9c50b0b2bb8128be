#pragma once

#include "bounded_series.h"

#include <telemetry.h>

#include <QList>
#include <vector>

namespace dlion::core {

class RunData;

// What the dashboard draws, with bounded memory per series.
//
// Fed with telemetry batches (directly, or by `catchUp()` from a session's
// RunData, which appends only the records not seen yet), it keeps per worker
// the recent history of share, compute rate, loss, fraction of the gradient
// sent and accuracy, the latest link matrices, and the recent merges. It
// emits nothing per record: views poll `revision()` on their own timer, so
// a flood of frames never turns into a flood of repaints.
class TelemetryModel {
public:
    enum class Metric { Share, Rate, Loss, FractionSent, Accuracy };
    static constexpr int kMetrics = 5;

    explicit TelemetryModel(qsizetype capacityPerSeries = 2048, qsizetype mergeCapacity = 256);

    void reset(int workers);
    void append(const protocol::TelemetryBatch &batch);
    void catchUp(const RunData &data);

    int workers() const { return m_workers; }
    // Bumps on every change; `epoch()` bumps on reset (series restart).
    quint64 revision() const { return m_revision; }
    quint64 epoch() const { return m_epoch; }

    const BoundedSeries &series(Metric metric, int worker) const;
    // Accuracy of the best worker at each evaluation.
    const BoundedSeries &bestAccuracy() const { return m_best; }
    // Accuracy of all workers' shards together (rank 0's report).
    const BoundedSeries &globalAccuracy() const { return m_global; }

    const protocol::RoundRecord *lastRound(int worker) const;
    double linkMbps(int from, int to) const;
    double linkFraction(int from, int to) const;
    const BoundedSeries &merges() const { return m_mergeSeries; }  // (t, best worker's score)
    const QList<protocol::MergeEvent> &recentMerges() const { return m_merges; }
    qint64 mergeCount() const { return m_mergeCount; }
    qint64 roundCount() const { return m_roundCount; }

private:
    void addRound(const protocol::RoundRecord &r);
    void addEval(const protocol::EvalRecord &e);
    void addMerge(const protocol::MergeEvent &m);

    qsizetype m_capacity;
    qsizetype m_mergeCapacity;
    int m_workers = 0;
    quint64 m_revision = 0;
    quint64 m_epoch = 0;
    std::vector<BoundedSeries> m_series;  // metric-major: metric * workers + worker
    BoundedSeries m_best, m_global, m_mergeSeries;
    std::vector<protocol::RoundRecord> m_last;
    std::vector<bool> m_hasLast;
    std::vector<double> m_accuracy;
    QList<protocol::MergeEvent> m_merges;
    qint64 m_mergeCount = 0;
    qint64 m_roundCount = 0;
    // Which RunData (reset id), and how much of it, catchUp() consumed.
    quint64 m_dataId = 0;
    std::vector<qsizetype> m_seenRounds;
    qsizetype m_seenEvals = 0;
    qsizetype m_seenMerges = 0;
};

} // namespace dlion::core
