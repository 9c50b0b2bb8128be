#pragma once

#include <QJsonObject>
#include <QList>
#include <QString>

#include <optional>

namespace dlion::core {

// How the deployer logs in to a host. A password is never stored: with
// `Password` it is asked for at run time and kept in memory only.
enum class SshAuth { KeyFile, Agent, Password };

struct ClusterHost {
    QString name;       // unique label used in messages and remote paths
    QString address;    // host name or IP reached over SSH
    int port = 22;
    QString user;
    SshAuth auth = SshAuth::Agent;
    QString keyFile;    // with auth: key (a leading ~/ is expanded)
    QString workDir;    // remote folder for the agent's files (absolute or ~/...)
    QString listen;     // address the agent binds (default: the one SSH reached)
    int agentPort = 0;  // 0: the agent picks a free port and reports it
    QString agentPath;  // a dlion-agent already installed there (no upload)
    double slowdown = 0;  // per-host emulated compute slowdown (0: from the job)
    double linkMbps = 0;  // per-host emulated cap on its links (0: from the job)
    // The host's own training data, where it is (empty: the job's). When a
    // host names either, every host's worker trains on its own data only.
    QString dataDir;
    QString dataset;
};

// A cluster file: the machines a real run deploys agents to. JSON or YAML,
// the same family as the job file:
//
//   name: lab
//   known_hosts: ~/.ssh/known_hosts   # where host keys are checked
//   connect_timeout_s: 10
//   rendezvous_port: 29500            # data-plane rendezvous on rank 0's host
//   agent_port: 0                     # default for every host
//   hosts:
//     - {name: edge-1, address: 10.0.0.5, user: alice, auth: key,
//        key_file: ~/.ssh/id_ed25519, work_dir: /tmp/dlion, slowdown: 2,
//        link_mbps: 20, dataset: imagefolder, data_dir: /srv/photos}
//
// Hosts become ranks in file order.
struct ClusterSpec {
    QString name;
    QString knownHosts;
    int connectTimeoutS = 10;
    int rendezvousPort = 0;  // 0: chosen by the caller
    QList<ClusterHost> hosts;

    // Validates every field; errors name the host and the field, e.g.
    // `host "edge-2": field "port" must be ...` (`load` adds the file name).
    static std::optional<ClusterSpec> fromJson(const QJsonObject &json, QString *error);
    static std::optional<ClusterSpec> load(const QString &path, QString *error);

    // What the cluster decides in a job, as job-file keys: "workers" (one
    // per host), and where hosts set them "slowdown" (1 for the others) and
    // "emulation.links" (a link is capped by the slower of its two ends;
    // one between hosts without link_mbps by 100 Gbit/s, i.e. not at all),
    // and "worker_data" where hosts name their own data.
    QJsonObject jobOverrides() const;
};

} // namespace dlion::core
