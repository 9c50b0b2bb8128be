#pragma once

#include <QJsonObject>
#include <QList>
#include <QString>

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

// Everything a worker needs to train. The controller fills the placement
// fields (rank, world, rendezvous) per agent; the rest comes from the job
// file and the command line. JSON keys are the snake_case of the members.
struct JobSpec {
    QString strategy = QStringLiteral("allreduce");
    QString model = QStringLiteral("lenet5");
    QString dataset = QStringLiteral("fashion-mnist");
    QString dataDir;  // empty: the Debian dataset package path
    QString partition = QStringLiteral("iid");  // "iid" or "dirichlet:ALPHA"
    int batchSize = 32;  // samples per worker per round (the mean share under WDB)
    double lr = 0.05;
    double momentum = 0.9;
    double weightDecay = 0.0;
    QString lrSchedule = QStringLiteral("constant");  // or "step:ROUNDS:GAMMA"
    quint64 seed = 1;
    Budget budget;
    double evalIntervalS = 2.0;
    int evalSamples = 10000;  // test samples per evaluation, split over workers
    int threads = 1;          // intra-op threads per worker
    QString device = QStringLiteral("cpu");
    bool verifyReplicas = false;  // report a parameter digest every round
    QList<double> slowdown;   // per-worker compute slowdown factors (>= 1)
    QJsonObject strategyOptions;  // strategy knobs, validated by the engine
    QJsonObject emulation;        // link caps and schedules, validated by the engine

    // Placement.
    int rank = 0;
    int world = 1;
    QString rendezvousHost = QStringLiteral("127.0.0.1");
    int rendezvousPort = 0;

    double dirichletAlpha() const;  // 0 for iid
    double slowdownFor(int worker) const;

    QJsonObject toJson() const;
    // Validates every field; on error returns nullopt and a message naming
    // the field and what is allowed.
    static std::optional<JobSpec> fromJson(const QJsonObject &json, QString *error);
};

} // namespace dlion::protocol
