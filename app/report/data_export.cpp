// CSV and JSON exports (QtCore only).
#include "report_writer.h"

#include <safe_file.h>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>

#include <cstdio>

namespace dlion::report {

namespace {

QString num(double v) { return QString::number(v, 'g', 10); }

// Writes `bytes` to `path` atomically, or to stdout for "-".
bool writeFile(const QString &path, const QByteArray &bytes, QString *error)
{
    if (path == QLatin1String("-")) {
        QFile out;
        if (!out.open(stdout, QIODevice::WriteOnly) || out.write(bytes) != bytes.size()) {
            *error = QStringLiteral("cannot write to standard output");
            return false;
        }
        return true;
    }
    return files::writeAtomically(QFileInfo(path).absoluteFilePath(), bytes, error);
}

QByteArray roundsCsv(const core::RunData &d)
{
    QByteArray csv = "worker,round,t,batch,share,rate,compute_s,comm_s,loss,slowdown,bytes_sent,param_digest\n";
    for (int w = 0; w < d.workers(); ++w) {
        for (const auto &r : d.rounds(w)) {
            csv += QStringLiteral("%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12\n")
                       .arg(w).arg(r.round).arg(num(r.t)).arg(r.batch).arg(num(r.share)).arg(num(r.rate))
                       .arg(num(r.computeS)).arg(num(r.commS)).arg(num(r.loss)).arg(num(r.slowdown))
                       .arg(r.bytesSent).arg(QString::number(r.paramDigest, 16))
                       .toUtf8();
        }
    }
    return csv;
}

QByteArray linksCsv(const core::RunData &d)
{
    QByteArray csv = "worker,round,t,peer,mbps,fraction\n";
    for (int w = 0; w < d.workers(); ++w) {
        for (const auto &r : d.rounds(w)) {
            const size_t n = std::max(r.linkMbps.size(), r.linkFraction.size());
            for (size_t j = 0; j < n; ++j) {
                if (int(j) == w)
                    continue;  // a worker has no link to itself
                const double mbps = j < r.linkMbps.size() ? r.linkMbps[j] : 0.0;
                const double frac = j < r.linkFraction.size() ? r.linkFraction[j] : 0.0;
                csv += QStringLiteral("%1,%2,%3,%4,%5,%6\n").arg(w).arg(r.round).arg(num(r.t)).arg(j).arg(num(mbps)).arg(num(frac)).toUtf8();
            }
        }
    }
    return csv;
}

QByteArray evalsCsv(const core::RunData &d)
{
    QByteArray csv = "worker,round,t,accuracy,loss,global_accuracy,global_loss,samples,final,min_accuracy,max_accuracy,"
                     "consensus_accuracy\n";
    for (const auto &e : d.evals()) {
        csv += QStringLiteral("%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12\n")
                   .arg(e.worker).arg(e.round).arg(num(e.t)).arg(num(e.accuracy)).arg(num(e.loss))
                   .arg(num(e.globalAccuracy)).arg(num(e.globalLoss)).arg(e.samples).arg(e.final ? 1 : 0)
                   .arg(num(e.minAccuracy)).arg(num(e.maxAccuracy)).arg(num(e.consensusAccuracy))
                   .toUtf8();
    }
    return csv;
}

QByteArray mergesCsv(const core::RunData &d)
{
    QByteArray csv = "round,t,from,to,score_before,score_from,alpha,manual\n";
    for (const auto &m : d.merges()) {
        csv += QStringLiteral("%1,%2,%3,%4,%5,%6,%7,%8\n")
                   .arg(m.round).arg(num(m.t)).arg(m.from).arg(m.to).arg(num(m.scoreBefore))
                   .arg(num(m.scoreFrom)).arg(num(m.alpha)).arg(m.manual ? 1 : 0)
                   .toUtf8();
    }
    return csv;
}

QString csvField(QString s)
{
    if (s.contains(QLatin1Char(',')) || s.contains(QLatin1Char('"')) || s.contains(QLatin1Char('\n')))
        s = QLatin1Char('"') + s.replace(QLatin1String("\""), QLatin1String("\"\"")) + QLatin1Char('"');
    return s;
}

QByteArray summaryCsv(const core::StoredRun &run)
{
    const QJsonObject s = run.summary();
    QByteArray csv = "key,value\n";
    auto add = [&csv](const QString &k, const QJsonValue &v) {
        const QString text = v.isDouble() ? num(v.toDouble()) : v.isNull() ? QString() : v.toVariant().toString();
        csv += (csvField(k) + QLatin1Char(',') + csvField(text) + QLatin1Char('\n')).toUtf8();
    };
    add(QStringLiteral("run_id"), run.info.id);
    for (const char *key : {"strategy", "model", "dataset", "partition", "workers", "status", "started_at", "ended_at",
                            "wall_s", "train_s", "samples", "samples_per_s", "final_accuracy", "final_loss",
                            "bytes_sent", "merges"})
        add(QString::fromLatin1(key), s.value(QLatin1String(key)));
    const QJsonObject tta = s.value("time_to_accuracy").toObject();
    for (auto it = tta.begin(); it != tta.end(); ++it)
        add(QStringLiteral("time_to_accuracy_") + it.key(), it.value());
    add(QStringLiteral("code_version"), run.info.codeVersion);
    add(QStringLiteral("tags"), run.info.tags.join(QLatin1Char(';')));
    return csv;
}

} // namespace

Result writeCsv(const core::StoredRun &run, const QString &dir)
{
    Result r;
    if (dir == QLatin1String("-")) {
        r.ok = writeFile(dir, roundsCsv(run.data), &r.error);
        return r;
    }
    QFileInfo fi(dir);
    if (fi.exists() && !fi.isDir()) {
        r.error = QStringLiteral("cannot write CSV files into %1: it is a file (CSV export writes a folder)").arg(fi.absoluteFilePath());
        return r;
    }
    if (!QDir().mkpath(dir)) {
        r.error = QStringLiteral("cannot create the folder %1").arg(fi.absoluteFilePath());
        return r;
    }
    const QDir d(dir);
    const QList<std::pair<QString, QByteArray>> files = {
        {QStringLiteral("rounds.csv"), roundsCsv(run.data)}, {QStringLiteral("links.csv"), linksCsv(run.data)},
        {QStringLiteral("evals.csv"), evalsCsv(run.data)},   {QStringLiteral("merges.csv"), mergesCsv(run.data)},
        {QStringLiteral("summary.csv"), summaryCsv(run)},
    };
    for (const auto &[name, bytes] : files) {
        if (!writeFile(d.filePath(name), bytes, &r.error))
            return r;
        r.files << d.filePath(name);
    }
    r.ok = true;
    return r;
}

Result writeJson(const core::StoredRun &run, const QString &path)
{
    Result r;
    r.ok = writeFile(path, QJsonDocument(run.summary()).toJson(QJsonDocument::Indented), &r.error);
    if (r.ok && path != QLatin1String("-"))
        r.files << path;
    return r;
}

} // namespace dlion::report
