#pragma once

#include <QJsonArray>
#include <QJsonObject>
#include <QList>
#include <QString>
#include <QStringList>

#include <optional>

namespace dlion::protocol {

// When a run stops: whichever limit is reached first. Zero means "no limit";
// at least one limit must be set.
struct Budget {
    double seconds = 0;
    double epochs = 0;
    double targetAccuracy = 0;
    qint64 maxRounds = 0;
};

// The learning rate's schedule, counted in this replica's optimizer steps
// (rounds), as torch.optim's schedulers count them: a linear warm-up over
// the first `warmupRounds` steps (Goyal et al. 2017, "Accurate, Large
// Minibatch SGD"), then lr x gamma every `decayEvery` steps.
struct LrSchedule {
    qint64 warmupRounds = 0;  // 0: no warm-up
    qint64 decayEvery = 0;    // 0: no decay
    double gamma = 1;

    // lr's multiplier at step `round` (0 for the first).
    double factor(qint64 round) const;
    // "constant", or "warmup:ROUNDS", "step:ROUNDS:GAMMA" or both joined by
    // '+'; nullopt for anything else.
    static std::optional<LrSchedule> parse(const QString &text);
};

// Periodic checkpoints of every worker's replica and optimizer state.
// Off while `dir` is empty.
struct CheckpointSpec {
    QString dir;
    double intervalS = 60;
    int keep = 3;  // newest files kept per worker
    bool enabled() const { return !dir.isEmpty(); }
};

// Which workers train together, in rank order. Generation 0 is the job's
// start; each regroup (a worker lost or rejoining) makes the next one, and
// every member adopts the parameters of `source` when the group forms.
struct GroupPlan {
    int generation = 0;
    QList<int> members;  // worker ids in rank order; empty = all of 0..world-1
    int source = 0;      // worker id whose parameters everyone starts from
    QString rendezvousHost;
    int rendezvousPort = 0;

    int rankOf(int worker) const { return int(members.indexOf(worker)); }
    QJsonObject toJson() const;
    // `world` is the job's worker count; every member must be below it.
    static std::optional<GroupPlan> fromJson(const QJsonObject &json, int world, QString *error);
};

// The dataset names a job (or a cluster host) may give.
const QStringList &datasetNames();

// Where one worker's data lives when each worker trains on its own (the
// host's data, no global partition). Empty fields take the job's.
struct WorkerData {
    QString dataset;
    QString dataDir;
};
// The job file's "worker_data" list (empty fields left out).
QJsonArray workerDataJson(const QList<WorkerData> &list);

// Everything a worker needs to train. The controller fills the placement
// fields (rank, world, rendezvous) per agent; the rest comes from the job
// file and the command line. JSON keys are the snake_case of the members.
struct JobSpec {
    QString strategy = QStringLiteral("allreduce");
    QString model = QStringLiteral("lenet5");
    // A TorchScript model's SHA-256 (64 lowercase hex digits): an agent
    // refuses a file that differs. Empty: not checked.
    QString modelSha256;
    QString dataset = QStringLiteral("fashion-mnist");
    QString dataDir;  // empty: the Debian dataset package path
    QString partition = QStringLiteral("iid");  // "iid" or "dirichlet:ALPHA"
    // One entry per worker: each trains on all of its own data (no global
    // partition). Empty: the job's dataset, partitioned over the workers.
    QList<WorkerData> workerData;
    // With workerData, which test split every worker scores on: "local" (its
    // own data's) or "shared" (the job's dataset and data_dir, on every host).
    QString testSet = QStringLiteral("local");
    QStringList classNames;  // labels of the user formats (index = class id); empty: from the data
    int batchSize = 32;  // samples per worker per round (the mean share under WDB)
    double lr = 0.05;
    double momentum = 0.9;
    double weightDecay = 0.0;
    QString lrSchedule = QStringLiteral("constant");  // LrSchedule::parse's text
    quint64 seed = 1;
    Budget budget;
    double evalIntervalS = 2.0;
    int evalSamples = 10000;  // test samples every replica is scored on
    int threads = 1;          // intra-op threads per worker
    QString device = QStringLiteral("cpu");
    bool verifyReplicas = false;  // report a parameter digest every round
    QList<double> slowdown;   // per-worker compute slowdown factors (>= 1)
    QJsonObject strategyOptions;  // strategy knobs, validated by the engine
    QJsonObject emulation;        // link caps and schedules, validated by the engine
    CheckpointSpec checkpoint;
    // A checkpoint directory (each worker takes its newest file there) or
    // one checkpoint file; empty: start fresh. Rounds and training time,
    // and so the budget, continue from the checkpoint.
    QString resumeFrom;

    // Placement. `rank` is this worker's stable id and `world` the job's
    // worker count; its rank within the current group comes from `group`.
    int rank = 0;
    int world = 1;
    QString rendezvousHost = QStringLiteral("127.0.0.1");
    int rendezvousPort = 0;
    // The group this worker joins; its rendezvous is the two fields above.
    // Absent from the JSON: generation 0 with every worker, from worker 0.
    GroupPlan group;

    double dirichletAlpha() const;  // 0 for iid
    // The dataset and folder `worker` trains on.
    WorkerData dataFor(int worker) const;
    double slowdownFor(int worker) const;
    // `group` with its members filled in and the rendezvous of this spec.
    GroupPlan initialGroup() const;

    QJsonObject toJson() const;
    // Validates every field; on error returns nullopt and a message naming
    // the field and what is allowed.
    static std::optional<JobSpec> fromJson(const QJsonObject &json, QString *error);
};

} // namespace dlion::protocol
