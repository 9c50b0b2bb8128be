// dlion-studio: the control center GUI.
#include "main_window.h"
#include "studio_resources.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QIcon>

int main(int argc, char *argv[])
{
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("DLion"));
    QApplication::setApplicationName(QStringLiteral("dlion-studio"));
    QApplication::setApplicationDisplayName(QStringLiteral("DLion Studio"));
    QApplication::setApplicationVersion(QStringLiteral(DLION_VERSION));
    QApplication::setDesktopFileName(QStringLiteral("dlion-studio"));
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("DLion Studio: set up a micro-cloud, train a model across it and watch DLion adapt."));
    parser.addHelpOption();
    parser.addVersionOption();
    parser.process(app);
    dlion::ui::initStudioResources();
    QApplication::setWindowIcon(QIcon(QStringLiteral(":/icons/dlion-studio.svg")));
    dlion::ui::MainWindow window;
    window.show();
    return app.exec();
}
