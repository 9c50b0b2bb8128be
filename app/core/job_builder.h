#pragma once

#include <job_spec.h>

#include <QJsonObject>
#include <QString>

#include <optional>

namespace dlion::core {

// Builds a job from an optional job file plus overrides (the command line
// or the GUI), overrides winning. Overrides use the job file's keys; nested
// keys are written "budget.seconds". The worker count comes from "workers"
// (default 4). Errors name the file or field.
struct JobRequest {
    protocol::JobSpec spec;
    int workers = 4;
};

std::optional<JobRequest> buildJob(const QString &jobFile, const QJsonObject &overrides, QString *error);

// A free TCP port on `host` at the time of the call.
quint16 pickFreePort(const QString &host = QStringLiteral("127.0.0.1"));

} // namespace dlion::core
