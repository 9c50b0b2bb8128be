#include "deploy_command.h"

#include "console_deployer.h"

#include <command_line.h>
#include <handshake.h>

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QTextStream>

namespace dlion::cli {

int DeployCommand::exec(const QStringList &args)
{
    const bool deploy = m_mode == Mode::Deploy;
    const QString name = deploy ? QStringLiteral("dlion deploy") : QStringLiteral("dlion stop");
    QTextStream err(stderr), out(stdout);
    const cmdline::Page page{
        name,
        deploy ? QStringLiteral("install, start and check agents on the hosts of a cluster file")
               : QStringLiteral("stop agents left on the hosts of a cluster file and remove their files"),
        name + QStringLiteral(" --cluster FILE [--accept-new-host-keys] [--quiet]"),
        deploy ? QStringLiteral("Installs and starts dlion-agent on every host of a cluster file over SSH, checks\n"
                                "that each answers with a fresh run secret, then stops them again.\n"
                                "dlion run --cluster FILE does the same before it trains.")
               : QStringLiteral("Stops the dlion-agents left on the hosts of a cluster file (for example by a\n"
                                "controller that was killed) and removes their files."),
        {name + QStringLiteral(" --cluster lab.yaml") + (deploy ? QStringLiteral(" --accept-new-host-keys") : QString())},
        QStringLiteral("0 success, 1 a host failed, 2 bad usage or an invalid cluster file.")};
    QCommandLineParser parser;
    parser.addOption({"cluster", "Cluster file (JSON or YAML).", "FILE"});
    parser.addOption({"accept-new-host-keys", "Trust and record host keys not yet known (never a changed one)."});
    parser.addOption({"quiet", "Print only errors."});
    if (int code = 0; !cmdline::parse(page, parser, args, &code))
        return code;
    if (!parser.isSet("cluster") || !parser.positionalArguments().isEmpty()) {
        err << name << ": give the cluster file with --cluster FILE\n";
        return 2;
    }
    ConsoleDeployer console;
    QString error;
    if (!console.load(parser.value("cluster"), parser.isSet("accept-new-host-keys"), parser.isSet("quiet"), &error)) {
        err << name << ": " << error << "\n";
        return 2;
    }
    core::Deployer &deployer = console.deployer();
    int status = 1;
    QObject::connect(&deployer, &core::Deployer::stopped, &deployer, [&](bool ok, const QString &) {
        if (ok && !parser.isSet("quiet"))
            out << (deploy ? "deployment check passed" : "agents stopped") << " on "
                << deployer.cluster().hosts.size() << (deployer.cluster().hosts.size() == 1 ? " host" : " hosts") << Qt::endl;
        status = ok ? status : 1;
        QCoreApplication::exit(0);
    });
    // Each host's failure is printed as it happens (ConsoleDeployer).
    QObject::connect(&deployer, &core::Deployer::failed, &deployer, [&] {
        err << name << ": the deployment failed" << Qt::endl;
        QCoreApplication::exit(0);
    });
    QObject::connect(&deployer, &core::Deployer::deployed, &deployer, [&] {
        status = 0;
        deployer.stop();
    });
    if (deploy) {
        deployer.deploy(protocol::handshake::makeSecret());
    } else {
        status = 0;
        deployer.stop();
    }
    QCoreApplication::exec();
    return status;
}

} // namespace dlion::cli
