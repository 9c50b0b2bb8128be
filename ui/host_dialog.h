#pragma once

#include <QDialog>
#include <QJsonObject>

class QComboBox;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace dlion::ui {

// Adds or edits one host of "My machines" (a cluster-file host entry),
// including where its own training data are.
class HostDialog : public QDialog {
    Q_OBJECT
public:
    explicit HostDialog(const QJsonObject &host, QWidget *parent = nullptr);

    QJsonObject host() const;

private:
    void check();

    QLineEdit *m_name, *m_address, *m_user, *m_keyFile, *m_workDir, *m_dataDir;
    QSpinBox *m_port;
    QComboBox *m_auth, *m_dataset;
    QLabel *m_problem;
    QJsonObject m_kept;  // the host as given
    QPushButton *m_ok = nullptr;
};

} // namespace dlion::ui
