#pragma once

#include <job_spec.h>
#include <telemetry.h>

#include <QCborMap>
#include <QDateTime>
#include <QJsonObject>
#include <QList>
#include <QString>

#include <optional>
#include <set>
#include <utility>

namespace dlion::core {

// How every strategy's accuracy is measured, stated in each summary and report.
inline constexpr const char *kEvaluationRule =
    "every replica is scored on the same test subset; accuracy is the mean replica (time to accuracy uses it), "
    "with the worst and best replica beside it, and at the end the parameter-averaged (consensus) model; "
    "evaluation time is not training time";


// The file a run folder keeps its final model in, by the model's format:
// model.pt (TorchScript, torch.jit.load) or model_state_dict.pt (a built-in
// model's state_dict, torch.load). A built-in model's run keeps both.
QString finalModelFileName(const QString &format);

// Everything observed during one run, in arrival order, and the summary
// derived from it (the `summary.json` contract of docs/architecture.md).
class RunData {
public:
    void reset(const protocol::JobSpec &job, int workers);
    // Merges are kept once by (round, from, to); after expectResends(),
    // rounds and evaluations held then are not added again.
    void add(const protocol::TelemetryBatch &batch);
    // For a controller taking a run over: the agents re-send what the one
    // before received but may not have stored, so copies of the records
    // held now (same worker, round and training time) are dropped.
    void expectResends();
    void setOutcome(int worker, const QCborMap &outcome);
    void setWorkerLost(int worker, const QString &reason);
    // What `summary.worker` trains on (the latest report wins: a restarted
    // worker reports again).
    void setDataSummary(const protocol::DataSummary &summary);
    void markStarted() { m_started = QDateTime::currentDateTimeUtc(); }
    void markEnded(bool ok, const QString &message);

    // Changes with every reset(), unique across RunData objects: a view that
    // caught up with another id must start over.
    quint64 resetId() const { return m_resetId; }
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

    // Accessors and a restore hook for the run store (app/core/run_store.h),
    // which rebuilds a RunData from disk.
    const QCborMap &outcome(int worker) const { return m_outcomes[worker]; }
    // The run's final model as an agent sent it (empty: none arrived) and
    // its description: format, sha256, parameters, input_shape, accuracy,
    // and for a built-in model state_dict_sha256 of finalStateDict().
    const QByteArray &finalModel() const { return m_finalModel; }
    const QByteArray &finalStateDict() const { return m_finalStateDict; }
    const QCborMap &finalModelInfo() const { return m_finalModelInfo; }
    const QString &lostReason(int worker) const { return m_lost[worker]; }
    const std::optional<protocol::DataSummary> &dataSummary(int worker) const { return m_data[worker]; }
    // Rises with every data summary received: the recorder stores them anew.
    int dataReports() const { return m_dataReports; }
    QDateTime startedAt() const { return m_started; }
    QDateTime endedAt() const { return m_ended; }
    bool ok() const { return m_ok; }
    const QString &message() const { return m_message; }
    void restoreTimes(const QDateTime &started, const QDateTime &ended, bool ok, const QString &message)
    {
        m_started = started;
        m_ended = ended;
        m_ok = ok;
        m_message = message;
    }

private:
    static quint64 nextResetId();

    quint64 m_resetId = nextResetId();
    protocol::JobSpec m_job;
    QList<QList<protocol::RoundRecord>> m_rounds;
    QList<protocol::EvalRecord> m_evals;
    QList<protocol::MergeEvent> m_merges;
    QList<std::set<std::pair<qint64, qint64>>> m_resendable;  // per worker (round, t in µs), see expectResends()
    qsizetype m_resendableEvals = 0;
    QList<QCborMap> m_outcomes;
    QByteArray m_finalModel, m_finalStateDict;
    QCborMap m_finalModelInfo;
    QStringList m_lost;
    QList<std::optional<protocol::DataSummary>> m_data;
    int m_dataReports = 0;
    QDateTime m_started, m_ended;
    bool m_ok = false;
    QString m_message;
};

} // namespace dlion::core
