#include "job_builder.h"

#include "structured_file.h"

#include <safe_file.h>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QHostAddress>
#include <QTcpServer>

namespace dlion::core {

namespace {

// A per-worker list, where given, has one entry per worker.
bool onePerWorker(const char *field, const char *what, qsizetype entries, int workers, QString *error)
{
    if (entries == 0 || entries == workers)
        return true;
    *error = QStringLiteral("field \"%1\" lists %2 %3 for %4 workers; give one per worker").arg(field).arg(entries).arg(what).arg(workers);
    return false;
}

// A TorchScript model file, checked without torch as far as that goes: it
// exists and is a zip archive, as torch.jit.save writes. The agents check
// the rest (a module, parameters, shapes) before they train, and its
// SHA-256, set here in the spec, so a file changed after the start is
// refused. A relative path is taken from the job file's folder when the job
// file names it. A model_sha256 the job gives must match the file.
bool checkModelFile(protocol::JobSpec &spec, const QString &base, QString *error)
{
    const QString path = QFileInfo(QDir(base), spec.model).absoluteFilePath();
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        *error = QStringLiteral("model %1: cannot read it (%2)").arg(path, f.errorString());
        return false;
    }
    if (f.read(4) != QByteArray("PK\x03\x04", 4)) {
        *error = QStringLiteral("model %1: not a TorchScript module (not the zip archive torch.jit.save writes); save "
                                "one from Python with torch.jit.script(model).save(PATH)").arg(path);
        return false;
    }
    const std::optional<QString> sha = files::sha256Hex(path, error);
    if (!sha)
        return false;
    if (!spec.modelSha256.isEmpty() && spec.modelSha256 != *sha) {
        *error = QStringLiteral("model %1: its SHA-256 is %2, not the job's model_sha256 %3; give the right file or "
                                "remove model_sha256").arg(path, *sha, spec.modelSha256);
        return false;
    }
    spec.model = path;
    spec.modelSha256 = *sha;
    return true;
}

} // namespace

std::optional<JobRequest> buildJob(const QString &jobFile, const QJsonObject &overrides, QString *error)
{
    QJsonObject job;
    if (!jobFile.isEmpty()) {
        auto loaded = readStructuredFile(jobFile, error);
        if (!loaded)
            return std::nullopt;
        job = *loaded;
    }
    for (auto it = overrides.begin(); it != overrides.end(); ++it) {
        const QStringList path = it.key().split('.');
        if (path.size() == 2) {
            QJsonObject inner = job.value(path[0]).toObject();
            inner.insert(path[1], it.value());
            job.insert(path[0], inner);
        } else {
            job.insert(it.key(), it.value());
        }
    }
    JobRequest req;
    const QJsonValue workers = job.value("workers");
    if (!workers.isUndefined()) {
        if (!workers.isDouble() || workers.toDouble() < 1 || workers.toDouble() > 64
            || workers.toDouble() != double(workers.toInt())) {
            *error = QStringLiteral("field \"workers\" must be a whole number from 1 to 64");
            return std::nullopt;
        }
        req.workers = workers.toInt();
    }
    job.remove("workers");
    if (!job.contains("budget"))
        job.insert("budget", QJsonObject{{"seconds", 60}});
    QString specError;
    auto spec = protocol::JobSpec::fromJson(job, &specError);
    if (!spec) {
        *error = jobFile.isEmpty() ? specError : QStringLiteral("%1: %2").arg(jobFile, specError);
        return std::nullopt;
    }
    if (!onePerWorker("slowdown", "factors", spec->slowdown.size(), req.workers, error)
        || !onePerWorker("worker_data", "data folders", spec->workerData.size(), req.workers, error))
        return std::nullopt;
    if (spec->model.endsWith(QLatin1String(".pt"))) {
        const QString base = jobFile.isEmpty() || overrides.contains("model") ? QDir::currentPath() : QFileInfo(jobFile).path();
        if (!checkModelFile(*spec, base, error))
            return std::nullopt;
    }
    spec->world = req.workers;
    req.spec = *spec;
    return req;
}

quint16 pickFreePort(const QString &host)
{
    QTcpServer probe;
    probe.listen(QHostAddress(host), 0);
    return probe.serverPort();
}

} // namespace dlion::core
