#pragma once

#include <QWidget>

class QRadioButton;
class QStackedWidget;

namespace dlion::ui {

class HostsForm;
class LocalClusterForm;

// First step of the setup: where training runs. "This computer" emulates
// a micro-cloud with local agents; "My machines" lists real hosts.
class ClusterPage : public QWidget {
    Q_OBJECT
public:
    enum class Mode { Local, Machines };

    explicit ClusterPage(QWidget *parent = nullptr);

    Mode mode() const;
    void setMode(Mode mode);
    LocalClusterForm *localForm() const { return m_local; }
    HostsForm *hostsForm() const { return m_hosts; }

Q_SIGNALS:
    void changed();

private:
    QRadioButton *m_localChoice, *m_machinesChoice;
    QStackedWidget *m_stack;
    LocalClusterForm *m_local;
    HostsForm *m_hosts;
};

} // namespace dlion::ui
