#pragma once

#include "agent_endpoint.h"
#include "run_data.h"
#include "run_store.h"

#include <QJsonObject>
#include <QObject>
#include <QTimer>

namespace dlion::core {

class RunSession;
struct ClusterSpec;

// What a stored run records as its cluster: where it ran, no credentials.
// Local: kind, workers, host. SSH: kind, name, workers, hosts (objects with
// name, address, port, user and slowdown when set) and the cluster file
// when the hosts came from one. Agents started by hand: kind, workers,
// agents ("HOST:PORT" in rank order).
QJsonObject localClusterInfo(int workers);
QJsonObject sshClusterInfo(const ClusterSpec &spec, const QString &file);
QJsonObject agentsClusterInfo(const QList<AgentEndpoint> &agents);

// Writes a run into the RunStore while it happens.
//
// Every flush (by default each second) writes what arrived since the last
// one in a single transaction: new round records as one packed chunk per
// worker, new evaluations and merges, and the run row's status and summary
// columns. A writer killed at any point leaves the store with every row of
// its last commit. Small per-flush chunks are compacted into one per ~2048
// rounds, inside the same transaction, so a long run stays small on disk.
//
// A store failure (disk full, file removed) is reported once through
// recordingFailed() and retried at the next flush; it never stops training.
class RunRecorder : public QObject {
    Q_OBJECT
public:
    explicit RunRecorder(RunStore *store, QObject *parent = nullptr);

    // Where the run ran (written with the run row; set before it begins).
    void setCluster(const QJsonObject &cluster) { m_cluster = cluster; }
    void setOutDir(const QString &dir) { m_outDir = dir; }
    const QString &outDir() const { return m_outDir; }
    void setFlushInterval(int ms) { m_timer.setInterval(ms); }
    void setCompactionRounds(qsizetype rounds) { m_compactRounds = rounds; }

    // Records the session's next run: begins when it starts connecting,
    // flushes while it runs, finishes with it. A run the session takes over
    // is not begun anew: resume() it. The session acknowledges the agents'
    // telemetry after each commit.
    void attach(RunSession *session);

    // Driving by hand (tests, replays). `data` must outlive the recording.
    bool begin(const RunData *data);
    // Goes on recording stored run `runId`, whose rows `data` starts with
    // (a control center reattached to its agents).
    void resume(qint64 runId, const RunData *data);
    bool flush();
    // Final flush, compaction, outcomes and status. Idempotent.
    bool finish(bool ok, const QString &message);

    qint64 runId() const { return m_runId; }
    bool isRecording() const { return m_runId > 0 && !m_finished; }
    QString errorString() const { return m_error; }

Q_SIGNALS:
    void committed(qint64 runId);
    void recordingFailed(const QString &message);

private:
    bool write(bool final, const QString &status, const QString &message);

    RunStore *m_store;
    const RunData *m_data = nullptr;
    QTimer m_timer;
    QJsonObject m_cluster;
    QString m_outDir;
    qint64 m_runId = 0;
    qsizetype m_compactRounds = 2048;
    QList<qsizetype> m_written;       // rounds written per worker
    QList<qsizetype> m_segmentStart;  // first round of the chunks not yet compacted
    qsizetype m_evalsWritten = 0;
    qsizetype m_mergesWritten = 0;
    int m_dataReportsWritten = 0;
    qint64 m_samples = 0;
    qint64 m_bytes = 0;
    bool m_finished = false;
    bool m_reported = false;
    QString m_error;
};

} // namespace dlion::core
