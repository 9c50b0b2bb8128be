#pragma once

#include "run_data.h"

#include <QDateTime>
#include <QJsonObject>
#include <QList>
#include <QString>
#include <QStringList>

#include <memory>
#include <optional>

class QSqlError;

namespace dlion::core {

struct RunNote {
    qint64 id = 0;
    QDateTime createdAt;
    QString text;
};

// One row of the run list: what a list, a search or a report header needs
// without loading the series.
struct RunInfo {
    qint64 id = 0;
    QDateTime createdAt, startedAt, endedAt;
    // running | finished | failed | interrupted. "interrupted" is derived
    // when reading: the row says running but its writer process is gone.
    QString status;
    QString message;
    QString strategy, model, dataset;
    int workers = 0;
    QJsonObject spec;     // the job (protocol::JobSpec::toJson)
    QJsonObject cluster;  // where it ran (kind, hosts, emulation)
    QString codeVersion;
    QString host;
    QString outDir;
    // Kept up to date while the run is written.
    double finalAccuracy = 0;
    double trainS = 0;
    double samplesPerS = 0;
    qint64 bytesSent = 0;
    int merges = 0;
    QStringList tags;
    QList<RunNote> notes;

    QJsonObject toJson() const;
};

// A run as stored: its metadata and everything observed, rebuilt into a
// RunData so summaries and reports come from the same code as live runs.
struct StoredRun {
    RunInfo info;
    RunData data;
    // RunData::summary() plus "run": the stored metadata (id, tags, notes,
    // cluster, code version).
    QJsonObject summary() const;
};

struct RunFilter {
    QString strategy;  // exact
    QString tag;       // exact
    QString status;    // exact (after deriving "interrupted")
    QString search;    // substring of id, strategy, model, dataset, tags, notes, message
    int limit = 0;     // 0: all, newest first
};

// The experiment store: one SQLite file per user, written through QtSql.
//
// Schema (PRAGMA user_version = kSchemaVersion): runs, round_chunks (one
// row per worker per flush, a packed blob, see round_series_codec.h),
// evals, merges, notes, tags. WAL journal; every write is one transaction,
// so a killed writer leaves all rows up to its last commit. Older schema
// versions are migrated when opened for writing; opened read-only they are
// migrated in a temporary copy, so a read never modifies the file.
//
// Not thread-safe: use one RunStore per thread.
class RunStore {
public:
    enum class Mode { ReadOnly, ReadWrite };
    enum class Error {
        None,
        Missing,        // read-only open of a file that does not exist
        Unopenable,     // cannot create or open (permissions, path)
        Corrupt,        // not a SQLite file, damaged, or not a DLion store
        NewerSchema,    // written by a newer DLion Studio
        UnknownRun,
        Io,             // a statement failed (disk full, locked too long)
    };

    static constexpr int kSchemaVersion = 4;

    // $DLION_STORE, else GenericDataLocation/dlion/runs.sqlite.
    static QString defaultPath();
    // Where run folders go when no --out is given (beside the store).
    static QString defaultRunsDir();

    RunStore();
    ~RunStore();
    RunStore(const RunStore &) = delete;
    RunStore &operator=(const RunStore &) = delete;

    bool open(const QString &path, Mode mode);
    void close();
    bool isOpen() const;
    QString path() const { return m_path; }
    Mode mode() const { return m_mode; }
    // The version found on disk at open (before any migration).
    int diskSchemaVersion() const { return m_diskVersion; }

    // The last failure: a one-line message naming the file, and its kind.
    QString errorString() const { return m_error; }
    Error error() const { return m_errorKind; }

    // ---- queries (any mode)
    QList<RunInfo> listRuns(const RunFilter &filter = {});
    std::optional<RunInfo> runInfo(qint64 id);
    std::optional<StoredRun> loadRun(qint64 id);
    // "12", "#12" or "last"/"latest" → an existing run id.
    std::optional<qint64> resolve(const QString &text);
    QStringList allTags();
    QStringList allStrategies();
    // Rows per table, for tests and `dlion runs --stats`.
    qint64 countRows(const QString &table, qint64 runId = 0);

    // ---- writing (ReadWrite)
    struct NewRun {
        QJsonObject spec;
        QString strategy, model, dataset;
        int workers = 0;
        QJsonObject cluster;
        QString outDir;
    };
    std::optional<qint64> createRun(const NewRun &run);
    // Every call below but the transaction ones runs inside the caller's
    // transaction if one is open, else in its own.
    bool beginTransaction();
    bool commit();
    void rollback();
    bool appendRounds(qint64 runId, int worker, qsizetype firstIndex, const QList<protocol::RoundRecord> &rounds,
                      qsizetype from, qsizetype to);
    // Replaces the chunks of `worker` starting at index >= firstIndex with one
    // chunk (compaction of the small per-flush chunks).
    bool replaceRounds(qint64 runId, int worker, qsizetype firstIndex, const QList<protocol::RoundRecord> &rounds,
                       qsizetype from, qsizetype to);
    bool appendEvals(qint64 runId, const QList<protocol::EvalRecord> &evals, qsizetype from);
    bool appendMerges(qint64 runId, const QList<protocol::MergeEvent> &merges, qsizetype from);
    // Status, times and the summary columns of the run list.
    struct Progress {
        QString status;
        QString message;
        QDateTime startedAt, endedAt;
        double finalAccuracy = 0;
        double trainS = 0;
        double samplesPerS = 0;
        qint64 bytesSent = 0;
        int merges = 0;
    };
    bool updateRun(qint64 runId, const Progress &progress);
    // Per worker: outcome, loss reason and data summary, as the run row's
    // outcomes_json (a data summary needs no column of its own).
    bool setWorkerOutcomes(qint64 runId, const RunData &data);
    bool deleteRun(qint64 id);
    bool addTag(qint64 id, const QString &tag);
    bool removeTag(qint64 id, const QString &tag);
    std::optional<qint64> addNote(qint64 id, const QString &text);

private:
    struct Impl;
    bool fail(Error kind, const QString &message);
    bool failQuery(const QSqlError &error);
    bool exec(const QString &sql, const QVariantList &binds = {});
    bool requireWritable();
    bool requireRun(qint64 id);
    bool createSchema();
    bool migrate(int from);
    bool migrateV1toV2();
    bool migrateV3toV4();
    bool checkStore();
    std::optional<RunInfo> readInfo(qint64 id);

    std::unique_ptr<Impl> d;
    QString m_path;
    Mode m_mode = Mode::ReadOnly;
    int m_diskVersion = 0;
    QString m_error;
    Error m_errorKind = Error::None;
};

} // namespace dlion::core
