CREATE TABLE accounts (id INT PRIMARY KEY, balance INT NOT NULL CHECK (balance >= 0));
CREATE TABLE ledger (id INT PRIMARY KEY, amount INT NOT NULL);
