#pragma once

#include <job_spec.h>
#include <telemetry.h>

#include <QCborMap>
#include <QDateTime>
#include <QJsonObject>
#include <QList>
#include <QString>

#include <optional>

namespace dlion::core {

// Everything observed during one run, in arrival order, and the summary
// derived from it (the `summary.json` contract of shared/DESIGN.md).
class RunData {
public:
    void reset(const protocol::JobSpec &job, int workers);
    void add(const protocol::TelemetryBatch &batch);
    void setOutcome(int worker, const QCborMap &outcome);
    void setWorkerLost(int worker, const QString &reason);
    void markStarted() { m_started = QDateTime::currentDateTimeUtc(); }
    void markEnded(bool ok, const QString &message);

    const protocol::JobSpec &job() const { return m_job; }
    int workers() const { return int(m_rounds.size()); }
    const QList<protocol::RoundRecord> &rounds(int worker) const { return m_rounds[worker]; }
    const QList<protocol::EvalRecord> &evals() const { return m_evals; }
    const QList<protocol::MergeEvent> &merges() const { return m_merges; }
    const protocol::RoundRecord *lastRound(int worker) const;
    // Latest accuracy of all workers' shards together (rank 0's record).
    std::optional<protocol::EvalRecord> lastGlobalEval() const;
    // First training time at which the global accuracy reached `target`.
    std::optional<double> timeToAccuracy(double target) const;
    qint64 totalSamples() const;
    qint64 totalBytesSent() const;
    double trainingSeconds() const;

    QJsonObject summary() const;

private:
    protocol::JobSpec m_job;
    QList<QList<protocol::RoundRecord>> m_rounds;
    QList<protocol::EvalRecord> m_evals;
    QList<protocol::MergeEvent> m_merges;
    QList<QCborMap> m_outcomes;
    QStringList m_lost;
    QDateTime m_started, m_ended;
    bool m_ok = false;
    QString m_message;
};

} // namespace dlion::core
