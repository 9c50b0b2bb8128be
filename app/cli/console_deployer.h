#pragma once

#include <deployer.h>

#include <QObject>

#include <memory>

namespace dlion::cli {

// A Deployer wired to the terminal: prints each host's progress, asks
// whether to trust an unknown host key (or follows --accept-new-host-keys),
// and reads passwords without echo. Without a terminal it never waits for
// an answer: unknown keys are refused and passwords declined, with a message.
class ConsoleDeployer : public QObject {
    Q_OBJECT
public:
    // Loads and validates the cluster file; false with a message naming the
    // file, host and field.
    bool load(const QString &clusterFile, bool acceptNewHostKeys, bool quiet, QString *error);

    // Sets what the cluster decides in the job overrides (see
    // ClusterSpec::jobOverrides); --slowdown and --links flags still win.
    bool applyTo(QJsonObject &overrides, QString *error) const;

    core::Deployer &deployer() { return *m_deployer; }
    const core::ClusterSpec &cluster() const { return m_deployer->cluster(); }
    // Hands the deployer over (to a RunLauncher); it stays wired to the
    // terminal, so this object must outlive it.
    std::unique_ptr<core::Deployer> takeDeployer() { return std::move(m_owned); }

private:
    void askHostKey(const QString &host, const QString &fingerprint);
    void askPassword(const QString &host);

    std::unique_ptr<core::Deployer> m_owned;
    core::Deployer *m_deployer = nullptr;
    bool m_interactive = false;
};

} // namespace dlion::cli
