// dlion-studio: the control center GUI.
#include "main_window.h"
#include "studio_resources.h"

#include <command_line.h>
#include <dlion_version.h>

#include <QApplication>
#include <QCommandLineParser>
#include <QIcon>

int main(int argc, char *argv[])
{
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("DLion"));
    QApplication::setApplicationName(QStringLiteral("dlion-studio"));
    QApplication::setApplicationDisplayName(QStringLiteral("DLion Studio"));
    QApplication::setApplicationVersion(QStringLiteral(DLION_VERSION_FULL));
    QApplication::setDesktopFileName(QStringLiteral("dlion-studio"));
    const dlion::cmdline::Page page{
        QStringLiteral("dlion-studio"), QStringLiteral("the DLion Studio control center"),
        QStringLiteral("dlion-studio [--help | --version]"),
        QStringLiteral("Set up a micro-cloud (local workers or SSH hosts), train a model across it and\n"
                       "watch DLion adapt: live accuracy, compute shares, link bandwidth. Runs are\n"
                       "recorded in the same run store as the dlion command line."),
        {QStringLiteral("dlion-studio"), QStringLiteral("QT_QPA_PLATFORM=offscreen dlion-studio --version")},
        QStringLiteral("0 when the window is closed, 2 bad usage.")};
    QCommandLineParser parser;
    if (int code = 0; !dlion::cmdline::parse(page, parser, app.arguments(), &code))
        return code;
    dlion::ui::initStudioResources();
    QApplication::setWindowIcon(QIcon(QStringLiteral(":/icons/dlion-studio.svg")));
    dlion::ui::MainWindow window;
    window.show();
    return app.exec();
}
