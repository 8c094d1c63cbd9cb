"""No run here."""
X = 1
