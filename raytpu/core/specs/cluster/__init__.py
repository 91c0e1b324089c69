"""The cluster's own config sections: its parts (cluster, network, alerting, storage), security, teams, grants."""
