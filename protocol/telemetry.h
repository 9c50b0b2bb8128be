#pragma once

#include <QCborMap>
#include <QJsonObject>
#include <QList>
#include <QString>

#include <optional>
#include <vector>

namespace dlion::protocol {

// One training round of one worker. Per-peer vectors are indexed by peer
// rank (the worker's own entry is 0).
struct RoundRecord {
    int worker = 0;
    qint64 round = 0;
    double t = 0;          // seconds since the run's training start
    int batch = 0;         // samples computed this round
    double share = 0;      // batch / global batch
    double rate = 0;       // measured compute rate, samples/s
    double computeS = 0;   // forward + backward (+ emulated slowdown)
    double commS = 0;      // gradient exchange
    double loss = 0;
    double slowdown = 1;
    qint64 bytesSent = 0;
    quint64 paramDigest = 0;  // hash of the replica's parameters after the step (0 = not computed)
    std::vector<double> linkBytes;     // bytes sent per outgoing link
    std::vector<double> linkMbps;      // estimated bandwidth per outgoing link
    std::vector<double> linkFraction;  // fraction of the gradient sent per link
};

struct EvalRecord {
    int worker = 0;
    qint64 round = 0;
    double t = 0;
    // One rule for every strategy: each replica is scored on the same test
    // subset (`samples` images); the group's figures are the mean replica
    // (globalAccuracy, what time-to-accuracy uses), the worst and best
    // replica, and (final evaluations only, else 0) the parameter-averaged
    // (consensus) model.
    double accuracy = 0;  // this worker's replica
    double loss = 0;
    double globalAccuracy = 0;  // mean over the group's replicas
    double globalLoss = 0;
    int samples = 0;
    bool final = false;
    // Every member reports each evaluation; the primary record (from rank 0
    // of the group) is the one that speaks for the group's global figures.
    bool primary = false;
    double minAccuracy = 0;
    double maxAccuracy = 0;
    double consensusAccuracy = 0;
};

struct MergeEvent {
    qint64 round = 0;
    double t = 0;
    int from = 0;  // the best worker
    int to = 0;
    double scoreBefore = 0;  // receiver's held-out accuracy before the merge
    double scoreFrom = 0;    // best worker's held-out accuracy
    double alpha = 0;
    bool manual = false;
};

// What one worker trains on, sent once as it starts: with per-host data
// every host's share differs (non-iid), and the report shows how.
struct DataSummary {
    int worker = 0;
    QString dataset;
    QString dataDir;
    qint64 samples = 0;      // training samples the worker holds
    qint64 testSamples = 0;  // test samples it is scored on
    QList<qint64> histogram; // training samples per class id
};

// One Telemetry frame. An agent numbers the frames it sends (`seq`, rising
// over the agent's life, 0 = unnumbered) and keeps each until the controller
// acknowledges it with the command {cmd: "ack", seq}; a reattaching
// controller gets the unacknowledged ones again, so it must drop records it
// already holds (RunData::add does).
struct TelemetryBatch {
    qint64 seq = 0;
    QList<RoundRecord> rounds;
    QList<EvalRecord> evals;
    QList<MergeEvent> merges;
    QList<DataSummary> data;
    bool isEmpty() const { return rounds.isEmpty() && evals.isEmpty() && merges.isEmpty() && data.isEmpty(); }
    qsizetype records() const { return rounds.size() + evals.size() + merges.size() + data.size(); }
    void clear();
};

QCborMap toCbor(const TelemetryBatch &batch);
// Splits a batch, records in order, into batches whose toCbor() bodies take
// at most `maxBytes` each (a single larger record travels alone), so a long
// backlog crosses as several frames under the receiver's limit.
QList<TelemetryBatch> split(const TelemetryBatch &batch, qsizetype maxBytes);
// Drops the `count` oldest records, round records first: evaluations,
// merges and data summaries are few and are the run's results.
void dropOldest(TelemetryBatch &batch, qsizetype count);
// Lenient on missing fields, strict on shape: returns false on a wrong type.
bool fromCbor(const QCborMap &map, TelemetryBatch *out);

// For records that lost their flag (older stores): in each evaluation
// (records with the same round) the lowest worker id is the primary.
void markPrimaryEvals(QList<EvalRecord> &evals);

QJsonObject toJson(const RoundRecord &r);
QJsonObject toJson(const EvalRecord &e);
QJsonObject toJson(const MergeEvent &m);
QJsonObject toJson(const DataSummary &d);
std::optional<DataSummary> dataSummaryFromJson(const QJsonObject &json);

} // namespace dlion::protocol
